package registry_test

import (
	"encoding/json"
	"maps"
	"net/http"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/retention"
)

// Plans are stored: read back by id, listed by repository and registry-wide
// by age; apply refuses a plan past retention.planmaxage, and a plan id of
// another repository is unknown.
func TestE2ERetentionPlansStoredAndListed(t *testing.T) {
	g := startRetention(t, map[string]any{"planmaxage": "1ms"})
	vs := history(t, g, "plans/app", 3, time.Now().Add(-400*day), day)
	history(t, g, "plans/other", 1, time.Now().Add(-400*day), day)
	declare(t, g, "prod", img("plans/app", vs[2]))
	p1 := g.preview(t, "plans/app", `{"min_age":"720h"}`)
	p2 := g.preview(t, "plans/other", `{"min_age":"720h"}`)
	code, _, out := g.send(t, http.MethodGet, "/gc/v1/repositories/plans/app/retention/plans/"+p1.ID, "")
	var got retention.Plan
	if code != http.StatusOK || json.Unmarshal(out, &got) != nil || got.ID != p1.ID || got.PolicyFingerprint != p1.PolicyFingerprint {
		t.Fatalf("GET plan: %d %s", code, out)
	}
	if code, _, out := g.send(t, http.MethodGet, "/gc/v1/repositories/plans/other/retention/plans/"+p1.ID, ""); code != http.StatusNotFound {
		t.Fatalf("another repository's plan: %d %s", code, out)
	}
	var list struct {
		Plans []struct{ ID, Repository string } `json:"plans"`
	}
	code, _, out = g.send(t, http.MethodGet, "/gc/v1/repositories/plans/app/retention/plans", "")
	if code != http.StatusOK || json.Unmarshal(out, &list) != nil || len(list.Plans) != 1 || list.Plans[0].ID != p1.ID {
		t.Fatalf("list: %d %s", code, out)
	}
	code, _, out = g.send(t, http.MethodGet, "/gc/v1/retention/plans?since="+time.Now().Add(-time.Hour).UTC().Format(time.RFC3339), "")
	if code != http.StatusOK || json.Unmarshal(out, &list) != nil || len(list.Plans) != 2 || list.Plans[0].ID != p2.ID || list.Plans[1].Repository != "plans/app" {
		t.Fatalf("list all: %d %s", code, out)
	}
	code, _, out = g.send(t, http.MethodGet, "/gc/v1/retention/plans?until="+time.Now().Add(-time.Hour).UTC().Format(time.RFC3339), "")
	if code != http.StatusOK || json.Unmarshal(out, &list) != nil || len(list.Plans) != 0 {
		t.Fatalf("list older: %d %s", code, out)
	}
	code, _, out = g.send(t, http.MethodPost, "/gc/v1/repositories/plans/app/retention/plans/"+p1.ID+"/apply", "")
	if c, _ := decodeErr(t, out); code != http.StatusConflict || c != "PLAN_EXPIRED" {
		t.Fatalf("apply an old plan: %d %s", code, out)
	}
	for _, bad := range []struct{ method, path, body string }{
		{http.MethodPost, "/gc/v1/repositories/plans/app/retention/preview", `{"cap":0}`},
		{http.MethodPost, "/gc/v1/repositories/plans/app/retention/preview", `{"min_age":"90d"}`},
		{http.MethodPost, "/gc/v1/repositories/plans/app/retention/preview", `{"include":["["]}`},
		{http.MethodPost, "/gc/v1/repositories/plans/app/retention/preview", `{"sources":["a/b"]}`},
		{http.MethodGet, "/gc/v1/repositories/plans/app/retention/plans/nothex", ""},
		{http.MethodGet, "/gc/v1/retention/plans?limit=0", ""},
	} {
		if code, _, out := g.send(t, bad.method, bad.path, bad.body); code != http.StatusBadRequest {
			t.Errorf("%s %s %s: %d %s", bad.method, bad.path, bad.body, code, out)
		}
	}
	if code, _, out := g.send(t, http.MethodPost, "/gc/v1/repositories/none/app/retention/preview", ""); code != http.StatusNotFound {
		t.Fatalf("unknown repository: %d %s", code, out)
	}
}

// Tag deletes flow into the online GC: once the window has passed, a
// collection deletes the manifests retention untagged, and only those.
func TestE2ERetentionTagDeletesFlowIntoGC(t *testing.T) {
	g := startRetention(t, nil)
	vs := history(t, g, "flow/app", 5, time.Now().Add(-400*day), day)
	declare(t, g, "prod", img("flow/app", vs[3]))
	p := g.preview(t, "flow/app", `{"rollback_slack":0,"min_age":"720h"}`)
	wantCandidates(t, p, vs[:3])
	if rep := g.apply(t, "flow/app", p.ID); len(rep.Deleted) != 3 {
		t.Fatalf("apply %+v", rep)
	}
	g.settle(t)
	rep := g.collect(t, "flow/app")
	if len(rep.ManifestsDeleted) != 3 {
		t.Fatalf("collected %v", rep.ManifestsDeleted)
	}
	for i, d := range vs {
		if stored(t, g, "flow/app", d) != (i >= 3) {
			t.Fatalf("v%d stored: %v", i, i < 3)
		}
	}
}

// Plans live in Redis, not in an instance: another instance on the same
// storage and Redis (or this one after a restart) reads and applies them,
// and an instance whose configured policy differs refuses to apply.
func TestE2ERetentionPlanSharedAndPolicyChange(t *testing.T) {
	m := miniredis.RunT(t)
	root := t.TempDir()
	base := reclaimOptions(t, e2eWindow, m.Addr())
	start := func(minAge string) *gcRegistry {
		opts := maps.Clone(base)
		opts["retention"] = map[string]any{"minage": minAge}
		return completeGC(t, registrytest.Start(t, registrytest.WithRootDirectory(root),
			registrytest.WithStorageMiddleware("gchook", nil), registrytest.WithStorageMiddleware("reclaim", opts)))
	}
	a := start("720h")
	vs := history(t, a, "shared/plan", 5, time.Now().Add(-400*day), day)
	declare(t, a, "prod", img("shared/plan", vs[4]))
	p := a.preview(t, "shared/plan", `{"rollback_slack":0}`)
	wantCandidates(t, p, vs[:4])

	changed := start("2160h")
	code, _, out := changed.send(t, http.MethodPost, "/gc/v1/repositories/shared/plan/retention/plans/"+p.ID+"/apply", "")
	if c, _ := decodeErr(t, out); code != http.StatusConflict || c != "POLICY_CHANGED" {
		t.Fatalf("apply under another policy: %d %s", code, out)
	}
	same := start("720h")
	if rep := same.apply(t, "shared/plan", p.ID); len(rep.Deleted) != 4 {
		t.Fatalf("apply on another instance: %+v", rep)
	}
}
