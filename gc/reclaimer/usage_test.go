package reclaimer

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/reclaim-registry/reclaim/gc/internal/gctest"
	"github.com/reclaim-registry/reclaim/reclaim"
)

// TestReclaimerRefreshesUsage: each tick refreshes at most UsageRefresh
// repositories: the due ones first, then the oldest estimates past
// UsageMaxAge, then, walking the catalog, the ones that have none.
func TestReclaimerRefreshesUsage(t *testing.T) {
	u := newUsageFixture(t)
	for _, repo := range []string{"a/due", "b/stale", "c/new", "d/new", "e/fresh"} {
		u.Tag(repo, "v1", u.Image(repo, nil, repo+" layer").Digest)
		u.Image(repo, nil, repo+" old layer")
	}
	u.WriteReverseLinks()
	ctx := context.Background()
	now := u.tr.Clock()
	put := func(repo string, at time.Time) {
		if err := u.usage.PutUsage(ctx, reclaim.Usage{Repository: repo, ComputedAt: at}, false); err != nil {
			t.Fatal(err)
		}
	}
	put("a/due", now)
	put("b/stale", now.Add(-2*time.Hour))
	put("z/gone", now.Add(-3*time.Hour)) // deleted since its estimate
	put("e/fresh", now)
	u.usage.MarkUsageDue(ctx, "a/due") //nolint:errcheck
	r, err := u.reclaimer(gctest.NewQueue(u.tr.Clock), Config{Enabled: true, Interval: time.Minute, Batch: 10,
		UsageRefresh: 3, UsageMaxAge: time.Hour, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	fresh := func(repo string) bool {
		rec, ok := u.usage.Record(repo)
		return ok && rec.Blobs > 0 && !rec.ComputedAt.Before(now) // the test's own records link nothing
	}
	state := func() string {
		var out []string
		for _, repo := range []string{"a/due", "b/stale", "c/new", "d/new", "e/fresh", "z/gone"} {
			_, ok := u.usage.Record(repo)
			out = append(out, fmt.Sprintf("%s:%v/%v", repo, ok, fresh(repo)))
		}
		return fmt.Sprint(out)
	}

	rep := r.Tick(ctx)
	if rep.UsageRefreshed != 3 || rep.UsageFailed != 0 || !fresh("a/due") || !fresh("b/stale") || u.usage.IsDue("a/due") {
		t.Fatalf("tick 1 refreshed %d (%d failed): %s; want the due a/due, then the oldest z/gone and b/stale", rep.UsageRefreshed, rep.UsageFailed, state())
	}
	if _, ok := u.usage.Record("z/gone"); ok {
		t.Fatalf("the estimate of a repository that is gone survived its refresh: %s", state())
	}
	if fresh("c/new") || fresh("e/fresh") {
		t.Fatalf("tick 1 went past its budget: %s", state())
	}
	rep = r.Tick(ctx)
	if rep.UsageRefreshed != 2 || !fresh("c/new") || !fresh("d/new") {
		t.Fatalf("tick 2 refreshed %d: %s; want the two without an estimate, found in the catalog", rep.UsageRefreshed, state())
	}
	if rec, _ := u.usage.Record("c/new"); rec.ReclaimableBytes == 0 || rec.ExclusiveBytes == 0 {
		t.Fatalf("c/new refreshed to %+v; want its untagged image reclaimable", rec)
	}
	if rep = r.Tick(ctx); rep.UsageRefreshed != 0 {
		t.Fatalf("tick 3 refreshed %d with every estimate fresh: %s", rep.UsageRefreshed, state())
	}
	// An hour on, every estimate is old: three per tick, oldest first.
	u.tr.Mu.Lock()
	u.tr.Now = u.tr.Now.Add(2 * time.Hour)
	u.tr.Mu.Unlock()
	if rep = r.Tick(ctx); rep.UsageRefreshed != 3 {
		t.Fatalf("an hour later a tick refreshed %d; want its budget of 3", rep.UsageRefreshed)
	}
	if st := r.Status(ctx); st.UsageRefreshed != 8 || st.UsageFailed != 0 {
		t.Fatalf("status counts %d refreshes (%d failed); want 8", st.UsageRefreshed, st.UsageFailed)
	}
	if runs := u.c.Runs(); len(runs) != 0 {
		t.Fatalf("the reclaimer's refreshes are listed as %d runs; nobody asked for them", len(runs))
	}
}

// TestReclaimerUsageWalkResumes: a budget smaller than the repositories
// without an estimate resumes the catalog walk where it stopped.
func TestReclaimerUsageWalkResumes(t *testing.T) {
	u := newUsageFixture(t)
	repos := []string{"r/1", "r/2", "r/3", "r/4", "r/5"}
	for _, repo := range repos {
		u.Tag(repo, "v1", u.Image(repo, nil, repo).Digest)
	}
	u.WriteReverseLinks()
	r, err := u.reclaimer(gctest.NewQueue(u.tr.Clock), Config{Enabled: true, Interval: time.Minute, Batch: 10, UsageRefresh: 2, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	for tick, want := range []int{2, 2, 1, 0} {
		if rep := r.Tick(context.Background()); rep.UsageRefreshed != want {
			t.Fatalf("tick %d refreshed %d, want %d (cursor %q)", tick+1, rep.UsageRefreshed, want, u.usage.Cursor())
		}
	}
	for _, repo := range repos {
		if _, ok := u.usage.Record(repo); !ok {
			t.Errorf("%s has no estimate after the walk", repo)
		}
	}
}
