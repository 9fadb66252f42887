// Package gcapi is the GC API: every endpoint under /gc/v1/ (collect,
// plans, runs, status, usage, pins, the in-use index, retention), its one
// route table (routes.go), the strict reading of request bodies (body.go,
// request.go) and the bounds on them (limits.go), the cross-site check in
// front of it (crosssite.go), its metrics, and the one table where an
// error becomes an HTTP status (errors.go): each code carries its status
// and Retry-After.
//
// It is built by New from a Config that names everything it uses: the
// collector, the stores, the storage reads, the access controller. The
// registry package wires them (registry/wire.go); nothing here opens
// storage or Redis.
package gcapi

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"strings"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/gc/collector"
	"github.com/reclaim-registry/reclaim/internal/config"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/reclaim/gcrun"
	"github.com/reclaim-registry/reclaim/redisstate/usage"
	"github.com/reclaim-registry/reclaim/registry/accesscontrol"
	"github.com/reclaim-registry/reclaim/retention/pin"
	"github.com/reclaim-registry/reclaim/retention/redisstore"
	"github.com/reclaim-registry/reclaim/trash"
)

// The GC API, served on the registry's own listener; every endpoint is one
// entry of the route table (routes.go: method and pattern to handler,
// with the access it needs):
//
//	POST /gc/v1/repositories/<name>/collect[?dry_run=&untagged=&cap=&plan=&async=]
//	POST /gc/v1/repositories/<name>/plan[?untagged=&cap=]
//	POST /gc/v1/repositories/<name>/plans/<id>/apply
//	GET  /gc/v1/plans/<id>
//	GET  /gc/v1/runs/<id>
//	GET  /gc/v1/status                        (status.go)
//	GET  /gc/v1/repositories/<name>/usage[?refresh=]  GET /gc/v1/usage[?top=&by=]  (usage.go)
//	GET|PUT|DELETE /gc/v1/repositories/<name>/pins[/<ref>]  (pins.go)
//	GET|PUT|DELETE /gc/v1/inuse/sources[/<source>]         (inuse.go)
//	/gc/v1/repositories/<name>/retention/..., /gc/v1/retention/plans (retention.go)
//
// Repository endpoints require the "delete" action on the repository from
// the registry's configured access controller; the GET endpoints require an
// authenticated caller ("pull" on the repository for runs and plans). A run
// or plan of a repository the caller may not see answers exactly as an
// unknown id does, so ids cannot be probed. A collect (or apply) that does
// not say dry_run=false is a dry run; request.go parses the options,
// and no option may loosen the configured untagged: keep (checkOverride).
// A write a browser sent for another site's page never gets here
// (crosssite.go).
// docs/api.md is the reference.
const gcPrefix = "/gc/v1/"

// maxBody bounds request bodies; the options fit in a few hundred bytes.
const maxBody = 64 << 10

// Config is everything the API uses, each named. Only Collector is
// needed for the API to serve (and Options.GC.Enabled); every other field
// may be nil, and the endpoints that need it then answer 405 (or, for
// status, say what is missing).
type Config struct {
	// Options are the reclaim entry's options: the window and gc.* (the
	// API serves only while gc.enabled).
	Options config.Options
	// Access is the registry's access controller.
	Access *accesscontrol.Control
	// Collector runs collections and plans; nil without the reclaim
	// middleware and on a pull-through cache (the API answers ErrDisabled).
	Collector *collector.Collector
	// Status reports the health of the tracker and link database.
	Status func(ctx context.Context) map[string]any
	// Exists reports whether storage holds the repository (manifests or
	// layer links). Optional: without it the collector finds out.
	Exists func(ctx context.Context, repo string) (bool, error)
	// Usage keeps the repositories' usage estimates and their rankings.
	Usage *usage.Store
	// Pins and InUse are the retention stores.
	Pins  *redisstore.Pins
	InUse *redisstore.InUse
	// Retention serves the retention endpoints.
	Retention *Retention
	// HasVersion reports whether repo holds the tag or manifest ref.
	HasVersion func(ctx context.Context, repo string, ref pin.Ref) (bool, error)
	// Fenced reports whether a collector fences manifest d of repo.
	Fenced func(ctx context.Context, repo string, d digest.Digest) (bool, error)
	// TagState reports whether a retention apply is deleting tag of repo
	// (fenced), and whether one held its fence lately (the mark).
	TagState func(ctx context.Context, repo, tag string) (fenced, lately bool, err error)
	// Reclaimer is the background reclaimer's part of GET /gc/v1/status
	// (nil: it is disabled).
	Reclaimer func(ctx context.Context) any
	// RedisHealth is what the tracker last read from Redis INFO (nil:
	// without the reclaim middleware).
	RedisHealth func() any
	// Trash serves /gc/v1/trash; nil while trash.keep is 0.
	Trash *trash.Bin
	// Deletions hears the blobs a purge of the trash deleted (source
	// "trash"), as it hears a collect's; nil: no deletion events.
	Deletions reclaim.DeletionSink
	// Next serves every request outside /gc/v1/.
	Next http.Handler
}

// ErrDisabled answers every GC API request while `gc.enabled` is off.
var ErrDisabled = fmt.Errorf("%w: set gc.enabled in the reclaim storage middleware options", collector.ErrDisabled)

// New builds the API of c: serving when c.Collector is set and gc.enabled,
// answering ErrDisabled otherwise (GET /gc/v1/status is served always).
func New(c Config) *API {
	var b *Config
	if c.Collector != nil {
		b = &c
	}
	api := newGCAPI(c.Access, c.Options, b, c.Next)
	api.statusPage = &statusHandler{access: c.Access, api: api, reclaimer: c.Reclaimer, health: c.RedisHealth}
	return api
}

// Collector is the API's collector, nil while the API is disabled.
func (h *API) Collector() *collector.Collector {
	if h.backend == nil {
		return nil
	}
	return h.backend.Collector
}

// Preview is a dry-run collect of repo (the console's), checked and
// counted in the metrics as the API's are.
func (h *API) Preview(ctx context.Context, repo string) (*collector.Report, error) {
	b := h.backend
	if b == nil {
		return nil, ErrDisabled
	}
	if b.Exists != nil {
		if ok, err := b.Exists(ctx, repo); err == nil && !ok {
			return nil, fmt.Errorf("%w: %s", collector.ErrRepositoryNotFound, repo)
		}
	}
	rep, err := b.Collector.Collect(ctx, repo, collector.RunOptions{DryRun: true})
	observe(rep, err)
	return rep, err
}

// API serves /gc/v1/ and hands every other request to Next.
type API struct {
	next       http.Handler
	statusPage *statusHandler // GET /gc/v1/status (status.go)
	opts       config.Options
	access     *accesscontrol.Control
	backend    *Config // what it serves from (New's Config); nil while the API is disabled
	bodies     *bodyLimiter
}

// newGCAPI serves the API on b when opts enable it, and answers
// ErrDisabled otherwise.
func newGCAPI(access *accesscontrol.Control, opts config.Options, b *Config, next http.Handler) *API {
	if !opts.GC.Enabled {
		b = nil
	}
	return &API{next: next, opts: opts, access: access, backend: b, bodies: newBodyLimiter(bodyBudget, bodyWait)}
}

func (h *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.HasPrefix(r.URL.Path, gcPrefix) {
		h.next.ServeHTTP(w, r)
		return
	}
	if err := h.serve(w, r); err != nil {
		WriteError(w, r, err)
	}
}

// planIDRe is a run's or a plan's id.
var planIDRe = regexp.MustCompile(`^[0-9a-f]{24}$`)

// serve routes the request (routes.go). While the API is disabled
// only the routes that say so are served; every other request, known or
// not, is told why.
func (h *API) serve(w http.ResponseWriter, r *http.Request) error {
	rt, m, err := match(r.Method, r.URL.Path)
	if h.backend == nil && (rt == nil || !rt.always) {
		return ErrDisabled
	}
	if err != nil {
		return err
	}
	return rt.serve(h, w, r, m)
}

// ValidateRepository accepts exactly the names Distribution serves under
// /v2/<name>/ and can store: the reference grammar whose storage path the
// drivers accept. The grammar allows a host with a port or an IPv6 literal
// ("localhost:5000/a"), but no driver stores ':', '[' or ']', so no
// repository can have such a name: that is a 400, not a 503 that says
// retry.
func ValidateRepository(repo string) error {
	if err := collector.ValidateName(repo); err != nil {
		return err
	}
	if !storagedriver.PathRegexp.MatchString("/" + repo) {
		return fmt.Errorf("%w: %q: not a storage path (a host with a port or an IPv6 address?)", collector.ErrInvalidName, repo)
	}
	return nil
}

// repoRequest validates the name, authorizes, parses, opens the backend and
// checks the repository exists, in that order: a bad name is a 400 whoever
// asks, and only a caller with access learns whether the repository exists.
// All of it comes before the collector's preconditions, so a request that
// can never succeed is never answered with a 503 that says retry.
func (h *API) repoRequest(r *http.Request, repo string) (collectRequest, *Config, error) {
	if err := ValidateRepository(repo); err != nil {
		return collectRequest{}, nil, err
	}
	if err := h.access.Authorize(r, repo, "delete"); err != nil {
		return collectRequest{}, nil, err
	}
	req, err := readRequest(r)
	if err != nil {
		return collectRequest{}, nil, err
	}
	if err := h.checkOverride(req); err != nil {
		return collectRequest{}, nil, err
	}
	b := h.backend
	if b.Exists != nil {
		// An error is not "absent": the run reads storage again and aborts
		// if it cannot.
		if ok, err := b.Exists(r.Context(), repo); err == nil && !ok {
			return collectRequest{}, nil, fmt.Errorf("%w: %s", collector.ErrRepositoryNotFound, repo)
		}
	}
	return req, b, nil
}

// checkOverride refuses an option that loosens a safety setting of the
// config: untagged=delete where the config says `untagged: keep`, unless
// gc.allowuntaggedoverride says callers may. The same or a stricter
// setting is always fine. (cap can only lower the configured cap: gc.)
func (h *API) checkOverride(req collectRequest) error {
	if req.Untagged == "delete" && h.opts.GC.KeepUntagged && !h.opts.GC.AllowUntaggedOverride {
		return fmt.Errorf("%w: untagged=delete is not allowed: the registry's config sets untagged: keep "+
			"(gc.allowuntaggedoverride: true lets callers override it)", errPolicyOverride)
	}
	return nil
}

// planUnknown is the one answer for a plan id the caller cannot use: not
// found, expired, or made for another repository. Saying which would let a
// caller probe other repositories' ids (and name them).
func planUnknown(id string) error { return fmt.Errorf("%w: %q", collector.ErrPlanNotInMemory, id) }

// runUnknown is planUnknown for runs.
func runUnknown(id string) error { return fmt.Errorf("%w: %q", errRunNotFound, id) }

// hidePlan turns every "this plan is not yours to use" error into
// planUnknown.
func hidePlan(err error, id string) error {
	if errors.Is(err, collector.ErrPlanNotInMemory) || errors.Is(err, collector.ErrPlanRepository) {
		return planUnknown(id)
	}
	return err
}

func (h *API) collect(w http.ResponseWriter, r *http.Request, repo, planID string) error {
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
		id, err := b.Collector.Start(r.Context(), repo, o, observe)
		if err != nil {
			observeAbort(err)
			return hidePlan(err, o.PlanID)
		}
		writeJSON(w, http.StatusAccepted, map[string]any{"run_id": id, "repository": repo, "status": gcrun.StatusRunning,
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

func (h *API) plan(w http.ResponseWriter, r *http.Request, repo string) error {
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

func (h *API) getRun(w http.ResponseWriter, r *http.Request, id string) error {
	return h.getRecord(w, r, func(b *Config) (string, any, error) {
		if !planIDRe.MatchString(id) {
			return "", nil, runUnknown(id)
		}
		// Any instance answers: a run of another instance is read from
		// the run records, and one whose process died reads interrupted.
		rep, ok, err := b.Collector.LookupRun(r.Context(), id)
		if err != nil {
			return "", nil, err
		}
		if !ok {
			return "", nil, runUnknown(id)
		}
		return rep.Repository, rep, nil
	}, runUnknown(id))
}

func (h *API) getPlan(w http.ResponseWriter, r *http.Request, id string) error {
	return h.getRecord(w, r, func(b *Config) (string, any, error) {
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
func (h *API) getRecord(w http.ResponseWriter, r *http.Request, find func(*Config) (repo string, v any, err error), unknown error) error {
	if err := h.access.Authorize(r, "", ""); err != nil {
		return err
	}
	repo, v, err := find(h.backend)
	if err != nil {
		return err
	}
	if err := h.access.Authorize(r, repo, "pull"); err != nil {
		// The caller is authenticated (checked above); a 401 here would
		// tell them the id exists and belongs to a repository they lack.
		return unknown
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}

// status is the API's part of GET /gc/v1/status (status.go).
func (h *API) status(ctx context.Context) map[string]any {
	if h.backend == nil {
		return map[string]any{"enabled": false, "gc_api": ErrDisabled.Error()}
	}
	out := map[string]any{"enabled": true, "window_seconds": int64(h.opts.Window.Seconds()), "cap": h.opts.GC.Cap,
		"untagged": map[bool]string{true: "keep", false: "delete"}[h.opts.GC.KeepUntagged]}
	if h.backend.Status != nil {
		maps.Copy(out, h.backend.Status(ctx))
	}
	return out
}
