package gcapi

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/reclaim-registry/reclaim/gc/collector"
	"github.com/reclaim-registry/reclaim/retention"
	"github.com/reclaim-registry/reclaim/retention/redisstore"
)

// Deploy-aware retention:
//
//	POST /gc/v1/repositories/<name>/retention/preview            build and store a plan {policy override}
//	GET  /gc/v1/repositories/<name>/retention/plans[?since=&until=&limit=]  the repository's plans, newest first
//	GET  /gc/v1/repositories/<name>/retention/plans/<id>         one plan
//	POST /gc/v1/repositories/<name>/retention/plans/<id>/apply   delete its candidate tags, each after a fresh check {stop_if_index_changed}
//	GET  /gc/v1/retention/plans[?since=&until=&limit=]           every repository's plans (catalog scope)
//
// preview and apply need "delete" on the repository, the repository's GETs
// "pull". The name is everything before the last "/retention/".

// retention serves a repository's retention endpoint what: "preview",
// "plans", "plan" (id) or "apply" (id).
func (h *API) retention(w http.ResponseWriter, r *http.Request, repo, what, id string) error {
	if err := ValidateRepository(repo); err != nil {
		return err
	}
	want, action := http.MethodGet, "pull"
	if what == "preview" || what == "apply" {
		want, action = http.MethodPost, "delete"
	}
	if r.Method != want {
		return fmt.Errorf("%w: %s; use %s", errMethod, r.Method, want)
	}
	if err := h.access.Authorize(r, repo, action); err != nil {
		return err
	}
	rb := h.backend.Retention
	if rb == nil {
		return fmt.Errorf("%w: retention needs the reclaim storage middleware's Redis", errMethod)
	}
	if id != "" {
		if err := retention.ValidatePlanID(id); err != nil {
			return err
		}
	}
	if b := h.backend; b.Exists != nil {
		if ok, err := b.Exists(r.Context(), repo); err == nil && !ok {
			return fmt.Errorf("%w: %s", collector.ErrRepositoryNotFound, repo)
		}
	}
	switch {
	case what == "preview":
		return h.retentionPreview(w, r, rb, repo)
	case what == "plans":
		return listPlans(w, r, rb, repo)
	case what == "apply":
		return h.retentionApply(w, r, rb, repo, id)
	}
	plan, err := rb.Plans.Get(r.Context(), repo, id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, plan)
	return nil
}

func (h *API) retentionPreview(w http.ResponseWriter, r *http.Request, rb *Retention, repo string) error {
	var o retention.PolicyOverride
	if err := readJSON(r, maxBody, &o); err != nil {
		return err
	}
	p, err := o.Apply(rb.Policy)
	if err != nil {
		return err
	}
	start := time.Now()
	plan, err := rb.Planner.Plan(r.Context(), repo, p, o)
	observePlan(repo, plan, err, time.Since(start))
	if ae := (*retention.AbortError)(nil); errors.As(err, &ae) {
		// no plan to store: the console lists the abort instead
		_ = rb.Plans.PutAborted(r.Context(), redisstore.AbortedPreview{Repository: repo, At: time.Now().UTC(),
			Reason: fmt.Sprint(ae.Reason), Detail: ae.Detail})
	}
	if err != nil {
		return err
	}
	if err := rb.Plans.Put(r.Context(), plan); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, plan)
	return nil
}

func (h *API) retentionApply(w http.ResponseWriter, r *http.Request, rb *Retention, repo, id string) error {
	var o retention.ApplyOptions
	if err := readJSON(r, maxBody, &o); err != nil {
		return err
	}
	plan, err := rb.Plans.Get(r.Context(), repo, id)
	if err != nil {
		return err
	}
	current, err := plan.Override.Apply(rb.Policy)
	if err != nil {
		return fmt.Errorf("%w: %v", retention.ErrPolicyChanged, err)
	}
	if err := retention.CheckApplicable(plan, current, time.Now(), rb.PlanMaxAge); err != nil {
		return err
	}
	rep := rb.Applier.Apply(r.Context(), plan, o)
	observeApply(rep)
	_ = rb.Plans.PutApply(r.Context(), rep) // for the console; the answer below is the record
	writeJSON(w, http.StatusOK, rep)
	return nil
}

// listPlans lists repo's plans, or every repository's when repo is "".
func listPlans(w http.ResponseWriter, r *http.Request, rb *Retention, repo string) error {
	q := r.URL.Query()
	until, since := time.Now(), time.Now().Add(-rb.PlanKeep)
	for _, f := range []struct {
		key string
		dst *time.Time
	}{{"since", &since}, {"until", &until}} {
		if v := q.Get(f.key); v != "" {
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				return fmt.Errorf("%w: %s=%q: an RFC 3339 time", errBadRequest, f.key, v)
			}
			*f.dst = t
		}
	}
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 || n > 1000 {
			return fmt.Errorf("%w: limit=%q: 1 to 1000", errBadRequest, v)
		}
		limit = n
	}
	list, err := rb.Plans.List(r.Context(), repo, since, until, limit)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"plans": list})
	return nil
}

// allPlans serves GET /gc/v1/retention/plans.
func (h *API) allPlans(w http.ResponseWriter, r *http.Request) error {
	if err := h.access.AuthorizeCatalog(r); err != nil {
		return err
	}
	rb := h.backend.Retention
	if rb == nil {
		return fmt.Errorf("%w: retention needs the reclaim storage middleware's Redis", errMethod)
	}
	return listPlans(w, r, rb, "")
}
