package registry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/distribution/distribution/v3/registry/auth"
	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/sirupsen/logrus"

	"github.com/reclaim-registry/reclaim/gc"
)

// The GC API, served on the registry's own listener:
//
//	POST /gc/v1/repositories/<name>/collect[?dry_run=&untagged=&cap=&plan=&async=]
//	POST /gc/v1/repositories/<name>/plan[?untagged=&cap=]
//	POST /gc/v1/repositories/<name>/plans/<id>/apply
//	GET  /gc/v1/plans/<id>
//	GET  /gc/v1/runs/<id>
//	GET  /gc/v1/status
//
// Repository endpoints require the "delete" action on the repository from
// the registry's configured access controller; the GET endpoints require an
// authenticated caller ("pull" on the repository for runs and plans). A run
// or plan of a repository the caller may not see answers exactly as an
// unknown id does, so ids cannot be probed. A collect (or apply) that does
// not say dry_run=false is a dry run; gcapi_request.go parses the options.
// docs/api.md is the reference.
const gcPrefix = "/gc/v1/"

// maxBody bounds request bodies; the options fit in a few hundred bytes.
const maxBody = 64 << 10

func init() { register(newGCAPI) }

// gcBackend is what the API needs from the storage layer.
type gcBackend struct {
	Collector *gc.Collector
	// Status reports the health of the tracker and link database.
	Status func(ctx context.Context) map[string]any
	// Exists reports whether storage holds the repository (manifests or
	// layer links). Optional: without it the collector finds out.
	Exists func(ctx context.Context, repo string) (bool, error)
}

// openGC builds the backend for a config; gcapi_storage.go sets it, tests
// replace it.
var openGC func(ctx context.Context, config *configuration.Configuration, c GCConfig) (*gcBackend, error)

type gcAPI struct {
	next   http.Handler
	config *configuration.Configuration
	cfg    GCConfig
	cfgErr error
	ac     auth.AccessController
	acErr  error

	mu      sync.Mutex
	backend *gcBackend
}

func newGCAPI(config *configuration.Configuration, next http.Handler) http.Handler {
	h := &gcAPI{next: next, config: config}
	h.cfg, h.cfgErr = ParseGCConfig(config)
	if h.cfgErr != nil {
		logrus.WithError(h.cfgErr).Error("reclaim: GC API disabled: invalid configuration")
	}
	if config != nil && config.Auth.Type() != "" {
		h.ac, h.acErr = auth.GetAccessController(config.Auth.Type(), config.Auth.Parameters())
		if h.acErr != nil {
			// Fail closed: every GC request is refused until fixed.
			logrus.WithError(h.acErr).Error("reclaim: GC API refuses requests: access controller")
		}
	}
	return h
}

func (h *gcAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.HasPrefix(r.URL.Path, gcPrefix) {
		h.next.ServeHTTP(w, r)
		return
	}
	if err := h.serve(w, r); err != nil {
		writeError(w, r, err)
	}
}

var (
	planIDRe = regexp.MustCompile(`^[0-9a-f]{24}$`)
	applyRe  = regexp.MustCompile(`^(.+)/plans/([^/]+)/apply$`)
)

func (h *gcAPI) serve(w http.ResponseWriter, r *http.Request) error {
	if h.cfgErr != nil {
		return fmt.Errorf("%w: %v", gc.ErrDisabled, h.cfgErr)
	}
	if !h.cfg.Present || !h.cfg.Enabled {
		return fmt.Errorf("%w: set gc.enabled in the reclaim storage middleware options", gc.ErrDisabled)
	}
	rest := strings.TrimPrefix(r.URL.Path, gcPrefix)
	switch {
	case rest == "status":
		return h.status(w, r)
	case strings.HasPrefix(rest, "runs/"):
		return h.getRun(w, r, strings.TrimPrefix(rest, "runs/"))
	case strings.HasPrefix(rest, "plans/"):
		return h.getPlan(w, r, strings.TrimPrefix(rest, "plans/"))
	case strings.HasPrefix(rest, "repositories/"):
		rest = strings.TrimPrefix(rest, "repositories/")
		if r.Method != http.MethodPost {
			return fmt.Errorf("%w: %s; use POST", errMethod, r.Method)
		}
		switch {
		case strings.HasSuffix(rest, "/collect"):
			return h.collect(w, r, strings.TrimSuffix(rest, "/collect"), "")
		case strings.HasSuffix(rest, "/plan"):
			return h.plan(w, r, strings.TrimSuffix(rest, "/plan"))
		default:
			if m := applyRe.FindStringSubmatch(rest); m != nil {
				return h.collect(w, r, m[1], m[2])
			}
		}
	}
	return fmt.Errorf("%w: %s", errNotFound, r.URL.Path)
}

// authorize asks the configured access controller. With no auth
// configured the registry is open, and so is this API (as upstream).
func (h *gcAPI) authorize(r *http.Request, repo, action string) error {
	if h.acErr != nil {
		return fmt.Errorf("access controller: %w", h.acErr)
	}
	if h.ac == nil {
		return nil
	}
	var access []auth.Access
	if repo != "" {
		access = append(access, auth.Access{Resource: auth.Resource{Type: "repository", Name: repo}, Action: action})
	}
	_, err := h.ac.Authorized(r, access...)
	return err
}

func (h *gcAPI) collector(ctx context.Context) (*gcBackend, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.backend != nil {
		return h.backend, nil
	}
	if openGC == nil {
		return nil, errUnavailable
	}
	b, err := openGC(ctx, h.config, h.cfg)
	if err != nil {
		// Not memoized: Redis may come up later.
		return nil, fmt.Errorf("%w: %v", errUnavailable, err)
	}
	h.backend = b
	return b, nil
}

// validateRepository accepts exactly the names Distribution serves under
// /v2/<name>/ and can store: the reference grammar whose storage path the
// drivers accept. The grammar allows a host with a port or an IPv6 literal
// ("localhost:5000/a"), but no driver stores ':', '[' or ']', so no
// repository can have such a name: that is a 400, not a 503 that says
// retry.
func validateRepository(repo string) error {
	if err := gc.ValidateName(repo); err != nil {
		return err
	}
	if !storagedriver.PathRegexp.MatchString("/" + repo) {
		return fmt.Errorf("%w: %q: not a storage path (a host with a port or an IPv6 address?)", gc.ErrInvalidName, repo)
	}
	return nil
}

// repoRequest validates the name, authorizes, parses, opens the backend and
// checks the repository exists, in that order: a bad name is a 400 whoever
// asks, and only a caller with access learns whether the repository exists.
// All of it comes before the collector's preconditions, so a request that
// can never succeed is never answered with a 503 that says retry.
func (h *gcAPI) repoRequest(r *http.Request, repo string) (collectRequest, *gcBackend, error) {
	if err := validateRepository(repo); err != nil {
		return collectRequest{}, nil, err
	}
	if err := h.authorize(r, repo, "delete"); err != nil {
		return collectRequest{}, nil, err
	}
	req, err := readRequest(r)
	if err != nil {
		return collectRequest{}, nil, err
	}
	b, err := h.collector(r.Context())
	if err != nil {
		return collectRequest{}, nil, err
	}
	if b.Exists != nil {
		// An error is not "absent": the run reads storage again and aborts
		// if it cannot.
		if ok, err := b.Exists(r.Context(), repo); err == nil && !ok {
			return collectRequest{}, nil, fmt.Errorf("%w: %s", gc.ErrRepositoryNotFound, repo)
		}
	}
	return req, b, nil
}

// planUnknown is the one answer for a plan id the caller cannot use: not
// found, expired, or made for another repository. Saying which would let a
// caller probe other repositories' ids (and name them).
func planUnknown(id string) error { return fmt.Errorf("%w: %q", gc.ErrPlanNotFound, id) }

// runUnknown is planUnknown for runs.
func runUnknown(id string) error { return fmt.Errorf("%w: %q", errRunNotFound, id) }

// hidePlan turns every "this plan is not yours to use" error into
// planUnknown.
func hidePlan(err error, id string) error {
	if errors.Is(err, gc.ErrPlanNotFound) || errors.Is(err, gc.ErrPlanRepository) {
		return planUnknown(id)
	}
	return err
}

func (h *gcAPI) collect(w http.ResponseWriter, r *http.Request, repo, planID string) error {
	req, b, err := h.repoRequest(r, repo)
	if err != nil {
		return err
	}
	if planID != "" {
		if !planIDRe.MatchString(planID) {
			return fmt.Errorf("%w: plan id %q", errBadRequest, planID)
		}
		if req.Plan != "" {
			return fmt.Errorf("%w: the plan id is in the path; give no plan option", errBadRequest)
		}
		req.Plan = planID
	}
	o := req.options()
	if req.Async {
		id, err := b.Collector.Start(r.Context(), repo, o)
		if err != nil {
			observeAbort(err)
			return hidePlan(err, o.PlanID)
		}
		go observeWhenDone(b.Collector, id)
		writeJSON(w, http.StatusAccepted, map[string]any{"run_id": id, "repository": repo, "status": "running",
			"status_url": gcPrefix + "runs/" + id})
		return nil
	}
	rep, err := b.Collector.Collect(r.Context(), repo, o)
	observe(rep, err)
	if err != nil {
		return hidePlan(err, o.PlanID)
	}
	writeJSON(w, http.StatusOK, rep)
	return nil
}

func (h *gcAPI) plan(w http.ResponseWriter, r *http.Request, repo string) error {
	req, b, err := h.repoRequest(r, repo)
	if err != nil {
		return err
	}
	if req.Plan != "" || req.Async || (req.DryRun != nil && !*req.DryRun) {
		return fmt.Errorf("%w: plan takes only untagged and cap", errBadRequest)
	}
	p, rep, err := b.Collector.Preview(r.Context(), repo, req.options())
	observe(rep, err)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"plan": p, "report": rep})
	return nil
}

func (h *gcAPI) getRun(w http.ResponseWriter, r *http.Request, id string) error {
	return h.getRecord(w, r, func(b *gcBackend) (string, any, error) {
		rep, ok := b.Collector.Run(id)
		if !ok {
			return "", nil, runUnknown(id)
		}
		return rep.Repository, rep, nil
	}, runUnknown(id))
}

func (h *gcAPI) getPlan(w http.ResponseWriter, r *http.Request, id string) error {
	return h.getRecord(w, r, func(b *gcBackend) (string, any, error) {
		p, ok := b.Collector.Plan(id)
		if !ok {
			return "", nil, planUnknown(id)
		}
		return p.Repository, p, nil
	}, planUnknown(id))
}

// getRecord serves a run or a plan found by find: readable by whoever may
// pull its repository. To anyone else it answers unknown, exactly as find
// does for an id that does not exist.
func (h *gcAPI) getRecord(w http.ResponseWriter, r *http.Request, find func(*gcBackend) (repo string, v any, err error), unknown error) error {
	if r.Method != http.MethodGet {
		return fmt.Errorf("%w: %s; use GET", errMethod, r.Method)
	}
	if err := h.authorize(r, "", ""); err != nil {
		return err
	}
	b, err := h.collector(r.Context())
	if err != nil {
		return err
	}
	repo, v, err := find(b)
	if err != nil {
		return err
	}
	if err := h.authorize(r, repo, "pull"); err != nil {
		// The caller is authenticated (checked above); a 401 here would
		// tell them the id exists and belongs to a repository they lack.
		return unknown
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}

func (h *gcAPI) status(w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodGet {
		return fmt.Errorf("%w: %s; use GET", errMethod, r.Method)
	}
	if err := h.authorize(r, "", ""); err != nil {
		return err
	}
	out := map[string]any{"enabled": true, "window_seconds": int64(h.cfg.Window.Seconds()), "cap": h.cfg.Cap,
		"untagged": map[bool]string{true: "keep", false: "delete"}[h.cfg.KeepUntagged]}
	b, err := h.collector(r.Context())
	if err != nil {
		var ae apiError
		_, ae = statusOf(err)
		out["backend"] = ae.Message
		writeJSON(w, http.StatusServiceUnavailable, out)
		return nil
	}
	if b.Status != nil {
		for k, v := range b.Status(r.Context()) {
			out[k] = v
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
