package collector

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/gc/internal/gctest"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/reclaim/gcrun"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// A repository that cannot be read is not collected: the run aborts and
// deletes nothing (the preconditions are in preconditions_test.go).
func TestAbortsDeleteNothing(t *testing.T) {
	for name, tc := range map[string]struct {
		setup func(*fixture)
		want  reclaim.AbortReason
	}{
		"unparsable manifest": {func(f *fixture) { f.RawManifest("x", []byte(`{"schemaVersion":2,`)) }, reclaim.AbortManifestUnreadable},
		"invalid manifest": {func(f *fixture) {
			f.RawManifest("x", []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":"nope"}`))
		}, reclaim.AbortManifestUnreadable},
		"manifest blob missing": {func(f *fixture) {
			d := digest.FromString("missing")
			f.Put(layout.RevisionDir("x", d)+"/link", []byte(d))
		}, reclaim.AbortManifestUnreadable},
		"unreadable tag": {func(f *fixture) { f.Put(layout.TagCurrentPath("x", "bad"), []byte("not a digest")) }, reclaim.AbortStorageUnreadable},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			f.Image("x", nil, "a")
			f.Layer("x", "dangling")
			tc.setup(f)
			f.checkAborts("x", tc.want)
		})
	}
}

// checkAborts runs a dry run and a real run of repo, and checks that both
// abort for want, are stored as aborted, change nothing and leave no lock.
func (f *fixture) checkAborts(repo string, want reclaim.AbortReason) {
	t := f.T
	t.Helper()
	before := f.Tree()
	for _, dry := range []bool{true, false} {
		rep, err := f.c.Collect(context.Background(), repo, RunOptions{DryRun: dry})
		var ae *AbortError
		if !errors.As(err, &ae) || ae.Reason != want || !errors.Is(err, ErrAborted) {
			t.Fatalf("dry=%v: err %v, want abort %s", dry, err, want)
		}
		if rep == nil || rep.Status != "aborted" || rep.Abort != string(want) {
			t.Fatalf("report %+v", rep)
		}
		if stored, ok := f.c.Run(rep.RunID); !ok || stored.Status != "aborted" {
			t.Fatal("aborted run not stored")
		}
	}
	if f.Tree() != before {
		t.Fatal("an aborted run changed storage")
	}
	if len(f.tr.Locks) != 0 {
		t.Fatal("lock not released")
	}
}

func TestPlanThenApply(t *testing.T) {
	f := newFixture(t)
	a := f.Image("p", nil, "a")
	b := f.Image("p", nil, "b")
	ctx := context.Background()
	plan, prev, err := f.c.Preview(ctx, "p", RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Manifests) != 2 || prev.PlanID != plan.ID || !prev.DryRun {
		t.Fatalf("plan %+v", plan)
	}
	// After the plan: b gets tagged, and a new orphan layer appears.
	f.Tag("p", "keep", b.Digest)
	orphan := f.Layer("p", "new-orphan")
	rep, err := f.c.Collect(ctx, "p", RunOptions{PlanID: plan.ID})
	if err != nil {
		t.Fatal(err)
	}
	if !has(rep.ManifestsDeleted, a.Digest) || has(rep.ManifestsDeleted, b.Digest) {
		t.Fatalf("%s", summary(rep))
	}
	if reasonOf(rep, reclaim.KindLayerLink, orphan.Digest) != reclaim.ReasonNotInPlan {
		t.Fatalf("orphan: %s", reasonOf(rep, reclaim.KindLayerLink, orphan.Digest))
	}
	changed := map[digest.Digest]bool{}
	for _, d := range rep.Changed {
		changed[d.Digest] = true
	}
	if !changed[b.Digest] || len(rep.Changed) != 5 { // b, its 2 links, its 2 blobs... and manifest blob
		t.Logf("changed: %+v", rep.Changed)
	}
	if !changed[b.Digest] {
		t.Fatal("b not reported as changed")
	}
	if _, err := f.c.Collect(ctx, "other", RunOptions{PlanID: plan.ID}); !errors.Is(err, ErrPlanRepository) {
		t.Fatalf("plan for another repo: %v", err)
	}
	if _, err := f.c.Collect(ctx, "p", RunOptions{PlanID: "nope"}); !errors.Is(err, ErrPlanNotInMemory) {
		t.Fatalf("unknown plan: %v", err)
	}
}

func TestRequestErrors(t *testing.T) {
	f := newFixture(t)
	f.Image("busy", nil, "l")
	ctx := context.Background()
	for _, name := range []string{"", "UPPER", "a//b", "_x", "a/", "x:tag"} {
		if _, err := f.c.Collect(ctx, name, RunOptions{}); !errors.Is(err, ErrInvalidName) {
			t.Errorf("%q: %v", name, err)
		}
	}
	if _, err := f.c.Collect(ctx, "nothing/here", RunOptions{}); !errors.Is(err, ErrRepositoryNotFound) {
		t.Errorf("unknown repo: %v", err)
	}
	_, unlock, _ := f.tr.LockRepository(ctx, "busy", time.Minute)
	if _, err := f.c.Collect(ctx, "busy", RunOptions{}); !errors.Is(err, reclaim.ErrRepositoryBusy) {
		t.Errorf("busy: %v", err)
	}
	if _, err := f.c.Collect(ctx, "busy", RunOptions{DryRun: true}); err != nil {
		t.Errorf("a dry run needs no lock: %v", err)
	}
	unlock()
}

func TestStartRunsInBackground(t *testing.T) {
	f := newFixture(t)
	f.Layer("bg", "x")
	// The run stores its report and gives its lock back before done.
	finished := make(chan string, 1)
	var unlocked atomic.Bool
	f.tr.OnUnlock = func(string) { unlocked.Store(true) }
	id, err := f.c.Start(context.Background(), "bg", RunOptions{}, func(rep *Report, err error) {
		if err != nil || rep.Status != gcrun.StatusDone || !unlocked.Load() {
			t.Errorf("done called with %v, %v (unlocked %v)", rep, err, unlocked.Load())
		}
		finished <- rep.RunID
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := gctest.Wait(t, finished, "the background run"); got != id {
		t.Fatalf("done reported run %q, started %q", got, id)
	}
	r, ok := f.c.Run(id)
	if !ok || r.Status != "done" {
		t.Fatalf("background run not stored as done: %+v", r)
	}
	if len(r.LayersUnlinked) != 1 {
		t.Fatalf("%s", summary(r))
	}
}

func TestPlanExpires(t *testing.T) {
	f := newFixture(t)
	f.Image("e", nil, "l")
	plan, _, err := f.c.Preview(context.Background(), "e", RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f.tr.Now = f.tr.Now.Add(defaultPlanTTL + time.Minute)
	if _, err := f.c.Collect(context.Background(), "e", RunOptions{PlanID: plan.ID}); !errors.Is(err, ErrPlanNotInMemory) {
		t.Fatalf("expired plan: %v", err)
	}
}
