package registry_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/retention"
	"github.com/reclaim-registry/reclaim/retention/inuse"
	"github.com/reclaim-registry/reclaim/retention/pin"
	"github.com/reclaim-registry/reclaim/retention/redisstore"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// The failure model and the fresh-state checks of plans and apply.

// inuseStore opens g's in-use index directly, to write what the API
// refuses (a corrupt or an old source).
func inuseStore(t *testing.T, g *gcRegistry) (*redisstore.InUse, string) {
	t.Helper()
	prefix := "reclaim:"
	for _, m := range g.Config.Middleware["storage"] {
		if p, ok := m.Options["prefix"].(string); ok && m.Name == "reclaim" {
			prefix = p
		}
	}
	return redisstore.NewInUse(g.Server.Env().Tracker.Client(), prefix), prefix
}

// previewErr asks for a plan that must be refused with 503 and reason.
func previewAborts(t *testing.T, g *gcRegistry, repo string, reason reclaim.AbortReason) {
	t.Helper()
	code, _, out := g.send(t, http.MethodPost, "/gc/v1/repositories/"+repo+"/retention/preview", `{"min_age":"720h"}`)
	if c, r := decodeErr(t, out); code != http.StatusServiceUnavailable || c != "RETENTION_ABORTED" || r != string(reason) {
		t.Fatalf("preview: %d %s, want 503 %s", code, out, reason)
	}
}

// An empty index aborts: no source, or sources that declare nothing.
func TestE2ERetentionEmptyIndexAborts(t *testing.T) {
	g := startRetention(t, nil)
	history(t, g, "empty/app", 3, time.Now().Add(-400*day), day)
	previewAborts(t, g, "empty/app", reclaim.AbortInUseEmpty)
	declare(t, g, "prod")
	previewAborts(t, g, "empty/app", reclaim.AbortInUseEmpty)
	for i := range 3 {
		if !tagged(t, g, "empty/app", tagName(i)) {
			t.Fatal("an aborted preview deleted a tag")
		}
	}
}

// A source older than retention.inusemaxage aborts the run.
func TestE2ERetentionStaleIndexAborts(t *testing.T) {
	g := startRetention(t, map[string]any{"inusemaxage": "1h"})
	vs := history(t, g, "stale/app", 3, time.Now().Add(-400*day), day)
	s, _ := inuseStore(t, g)
	if _, err := s.Put(t.Context(), "prod", []inuse.Image{img("stale/app", vs[2])}, time.Now().Add(-2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	previewAborts(t, g, "stale/app", reclaim.AbortInUseStale)
}

// A source that cannot be read skips the repositories that rely on it;
// a repository whose policy names only readable sources is planned.
func TestE2ERetentionUnreadableSourceSkipsOnlyItsRepositories(t *testing.T) {
	g := startRetention(t, nil)
	a := history(t, g, "src/a", 4, time.Now().Add(-400*day), day)
	history(t, g, "src/b", 4, time.Now().Add(-400*day), day)
	declare(t, g, "good", img("src/a", a[2]))
	declare(t, g, "bad", img("src/b", a[0]))
	_, prefix := inuseStore(t, g)
	c := g.Server.Env().Tracker.Client()
	if err := c.SAdd(t.Context(), prefix+"{inuse:bad}:images", "not-an-image").Err(); err != nil {
		t.Fatal(err)
	}
	p := g.preview(t, "src/a", `{"sources":["good"],"rollback_slack":0,"min_age":"720h"}`)
	wantCandidates(t, p, a[:2])
	p = g.preview(t, "src/b", `{"min_age":"720h"}`)
	if p.Status != retention.PlanSkipped || p.Skip.Reason != retention.SkipSourceUnreadable {
		t.Fatalf("plan %+v", p)
	}
	code, _, out := g.send(t, http.MethodPost, "/gc/v1/repositories/src/b/retention/plans/"+p.ID+"/apply", "")
	if c, _ := decodeErr(t, out); code != http.StatusConflict || c != "PLAN_SKIPPED" {
		t.Fatalf("apply a skipped plan: %d %s", code, out)
	}
}

// A repository whose tag list cannot be read is skipped; others are not.
func TestE2ERetentionUnreadableTagListSkipsRepository(t *testing.T) {
	g := startRetention(t, nil)
	vs := history(t, g, "tags/broken", 4, time.Now().Add(-400*day), day)
	declare(t, g, "prod", img("tags/broken", vs[3]))
	setHook(t, func(ctx context.Context, method, path string) error {
		if method == "List" && path == layout.TagsDir("tags/broken") {
			return errors.New("injected: listing failed")
		}
		return nil
	})
	p := g.preview(t, "tags/broken", `{"min_age":"720h"}`)
	if p.Status != retention.PlanSkipped || p.Skip.Reason != retention.SkipTagsUnreadable || len(p.Candidates) != 0 {
		t.Fatalf("plan %+v", p)
	}
	setHook(t, nil)
	if p = g.preview(t, "tags/broken", `{"rollback_slack":0,"min_age":"720h"}`); len(p.Candidates) != 3 {
		t.Fatalf("readable again: %+v", p)
	}
}

// A plan over its cap is trimmed to its oldest candidates, and apply
// deletes exactly those.
func TestE2ERetentionCapTrimsToOldest(t *testing.T) {
	g := startRetention(t, nil)
	vs := history(t, g, "cap/app", 20, time.Now().Add(-400*day), day)
	declare(t, g, "prod", img("cap/app", vs[19]))
	p := g.preview(t, "cap/app", `{"rollback_slack":0,"min_age":"720h","cap":5}`)
	wantCandidates(t, p, vs[:5])
	if p.Trimmed != 14 || reasonFor(p, vs[5]) != retention.KeptOverCap {
		t.Fatalf("trimmed %d: %+v", p.Trimmed, p)
	}
	if rep := g.apply(t, "cap/app", p.ID); len(rep.Deleted) != 5 || tagged(t, g, "cap/app", "v004") || !tagged(t, g, "cap/app", "v005") {
		t.Fatalf("apply %+v", rep)
	}
}

// A deploy that lands while the plan is built is dropped from the plan by
// the re-read after the build.
func TestE2ERetentionDeployDuringPlan(t *testing.T) {
	g := startRetention(t, nil)
	vs := history(t, g, "during/plan", 10, time.Now().Add(-400*day), day)
	declare(t, g, "prod", img("during/plan", vs[9]))
	var fired atomic.Bool
	setHook(t, func(ctx context.Context, method, path string) error {
		if method == "List" && path == layout.TagsDir("during/plan") && fired.CompareAndSwap(false, true) {
			declare(t, g, "prod", img("during/plan", vs[9]), img("during/plan", vs[3]))
		}
		return nil
	})
	p := g.preview(t, "during/plan", `{"rollback_slack":1,"min_age":"720h"}`)
	wantCandidates(t, p, vs[:2])
	if len(p.Dropped) != 6 || reasonFor(p, vs[3]) != retention.KeptInUse {
		t.Fatalf("dropped %+v", p.Dropped)
	}
}

// A deploy that lands between plan and apply is respected.
func TestE2ERetentionDeployBetweenPlanAndApply(t *testing.T) {
	g := startRetention(t, nil)
	vs := history(t, g, "between/app", 8, time.Now().Add(-400*day), day)
	declare(t, g, "prod", img("between/app", vs[7]))
	p := g.preview(t, "between/app", `{"rollback_slack":0,"min_age":"720h"}`)
	wantCandidates(t, p, vs[:7])
	declare(t, g, "rollback", img("between/app", vs[2]))
	rep := g.apply(t, "between/app", p.ID)
	if len(rep.Deleted) != 6 || len(rep.Skipped) != 1 || rep.Skipped[0].Digest != vs[2] || rep.Skipped[0].Reason != retention.ChangedInUse {
		t.Fatalf("apply %+v", rep)
	}
	if !tagged(t, g, "between/app", "v002") || tagged(t, g, "between/app", "v001") {
		t.Fatal("wrong tags deleted")
	}
}

// A deploy that lands during apply (while it deletes the oldest tag) is
// respected for the tags after it.
func TestE2ERetentionDeployDuringApply(t *testing.T) {
	g := startRetention(t, nil)
	vs := history(t, g, "during/apply", 8, time.Now().Add(-400*day), day)
	declare(t, g, "prod", img("during/apply", vs[7]))
	p := g.preview(t, "during/apply", `{"rollback_slack":0,"min_age":"720h"}`)
	var fired atomic.Bool
	setHook(t, func(ctx context.Context, method, path string) error {
		if method == "Delete" && strings.HasSuffix(path, "/_manifests/tags/v000") && fired.CompareAndSwap(false, true) {
			declare(t, g, "hotfix", img("during/apply", vs[4]))
		}
		return nil
	})
	rep := g.apply(t, "during/apply", p.ID)
	if !fired.Load() || len(rep.Deleted) != 6 || len(rep.Skipped) != 1 || rep.Skipped[0].Tag != "v004" || rep.Skipped[0].Reason != retention.ChangedInUse {
		t.Fatalf("apply %+v", rep)
	}
}

// A pin added after the preview is respected, and so is a tag moved to
// another manifest.
func TestE2ERetentionPinAfterPreview(t *testing.T) {
	g := startRetention(t, nil)
	vs := history(t, g, "pinned/app", 6, time.Now().Add(-400*day), day)
	declare(t, g, "prod", img("pinned/app", vs[5]))
	p := g.preview(t, "pinned/app", `{"rollback_slack":0,"min_age":"720h"}`)
	wantCandidates(t, p, vs[:5])
	if code, body := g.pin(t, "pinned/app", pin.Ref{Tag: "v001"}, `{"note":"audit"}`); code != http.StatusCreated {
		t.Fatalf("pin: %d %s", code, body)
	}
	if code, body := g.pin(t, "pinned/app", vs[3], ""); code != http.StatusCreated {
		t.Fatalf("pin: %d %s", code, body)
	}
	rep := g.apply(t, "pinned/app", p.ID)
	skipped := map[string]retention.LeftReason{}
	for _, s := range rep.Skipped {
		skipped[s.Tag] = s.Reason
	}
	if len(rep.Deleted) != 3 || skipped["v001"] != retention.ChangedPinned || skipped["v003"] != retention.ChangedPinned {
		t.Fatalf("apply %+v", rep)
	}
	if p := g.preview(t, "pinned/app", `{"rollback_slack":0,"min_age":"720h"}`); reasonFor(p, vs[1]) != retention.KeptPinned || len(p.Candidates) != 0 {
		t.Fatalf("plan after pins: %+v", p)
	}
}

// applyWith applies plan id of repo with the request body body.
func (g *gcRegistry) applyWith(t *testing.T, repo, id, body string) *retention.ApplyReport {
	t.Helper()
	code, _, out := g.send(t, http.MethodPost, "/gc/v1/repositories/"+repo+"/retention/plans/"+id+"/apply", body)
	var rep retention.ApplyReport
	if code != http.StatusOK || json.Unmarshal(out, &rep) != nil {
		t.Fatalf("apply %s: %d %s", id, code, out)
	}
	return &rep
}

// Apply says whether the in-use index changed since the plan; asked to,
// it stops before deleting anything once it has.
func TestE2ERetentionIndexChangedBetweenPlanAndApply(t *testing.T) {
	g := startRetention(t, nil)
	vs := history(t, g, "moved/app", 8, time.Now().Add(-400*day), day)
	declare(t, g, "prod", img("moved/app", vs[7]))
	p := g.preview(t, "moved/app", `{"rollback_slack":0,"min_age":"720h"}`)
	if len(p.InUse) != 1 || p.InUse[0] != vs[7] {
		t.Fatalf("plan's in-use manifests %v, want [%s]", p.InUse, vs[7])
	}
	declare(t, g, "rollback", img("moved/app", vs[2]))
	rep := g.applyWith(t, "moved/app", p.ID, `{"stop_if_index_changed":true}`)
	if rep.Aborted == nil || rep.Aborted.Reason != reclaim.AbortInUseChanged || len(rep.Deleted) != 0 ||
		!rep.InUseChanged || len(rep.InUseAdded) != 1 || rep.InUseAdded[0] != vs[2] || !strings.HasPrefix(rep.InUseNote, "the in-use index changed since this plan") {
		t.Fatalf("apply %+v", rep)
	}
	if !tagged(t, g, "moved/app", "v000") {
		t.Fatal("a tag was deleted although the apply was asked to stop")
	}

	// A fresh plan of the same index applies, and says nothing changed.
	p = g.preview(t, "moved/app", `{"rollback_slack":0,"min_age":"720h"}`)
	rep = g.applyWith(t, "moved/app", p.ID, `{"stop_if_index_changed":true}`)
	if rep.Aborted != nil || rep.InUseChanged || rep.InUseNote != "" || len(rep.Deleted) != 2 { // v000, v001: below the oldest in use
		t.Fatalf("apply of a fresh plan %+v", rep)
	}
}

// A deploy during apply (forced by a hook on the first tag delete): the
// new in-use version protects itself, not the version the policy keeps
// below it, and the report says so; with stop_if_index_changed the run
// stops before its next delete.
func TestE2ERetentionIndexChangedDuringApply(t *testing.T) {
	g := startRetention(t, map[string]any{"recheck": "1ns"}) // every delete re-reads the index
	for _, stop := range []bool{false, true} {
		repo := fmt.Sprintf("during/stop-%t", stop)
		vs := history(t, g, repo, 8, time.Now().Add(-400*day), day)
		declare(t, g, "prod", img(repo, vs[7]))
		p := g.preview(t, repo, `{"rollback_slack":1,"min_age":"720h"}`)
		wantCandidates(t, p, vs[:6])
		var fired atomic.Bool
		setHook(t, func(ctx context.Context, method, path string) error {
			if method == "Delete" && strings.HasSuffix(path, repo+"/_manifests/tags/v000") && fired.CompareAndSwap(false, true) {
				declare(t, g, "hotfix", img(repo, vs[4]))
			}
			return nil
		})
		rep := g.applyWith(t, repo, p.ID, fmt.Sprintf(`{"stop_if_index_changed":%t}`, stop))
		setHook(t, nil)
		if !fired.Load() || !rep.InUseChanged || len(rep.InUseAdded) != 1 || rep.InUseAdded[0] != vs[4] {
			t.Fatalf("stop=%t: apply %+v", stop, rep)
		}
		if stop {
			if rep.Aborted == nil || rep.Aborted.Reason != reclaim.AbortInUseChanged || len(rep.Deleted) != 1 || !tagged(t, g, repo, "v003") {
				t.Fatalf("stop: apply %+v", rep)
			}
			continue
		}
		// v004 protects itself; v003, the rollback slack a fresh plan keeps, goes.
		if rep.Aborted != nil || len(rep.Deleted) != 5 || len(rep.Skipped) != 1 || rep.Skipped[0].Tag != "v004" || tagged(t, g, repo, "v003") {
			t.Fatalf("go on: apply %+v", rep)
		}
	}
}
