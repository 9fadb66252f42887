package reclaimer

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/gc/collector"
	"github.com/reclaim-registry/reclaim/gc/internal/gctest"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

func TestReclaimerDecidesEachItem(t *testing.T) {
	f := newFixture(t)
	q := gctest.NewQueue(f.tr.Clock)
	now := f.tr.Clock()

	orphan := f.Blob("orphan: upload committed, manifest never came")
	linked := f.Layer("app", "still linked by app")
	recent := f.Blob("pulled a moment ago")
	f.tr.Access[reclaim.Object{Blob: recent.Digest}] = now.Add(-time.Minute)
	missing := digest.FromString("never existed")
	for _, d := range []digest.Digest{orphan.Digest, linked.Digest, recent.Digest, missing} {
		q.Add(d, now)
	}
	notDue := f.Blob("queued, not due yet")
	q.Add(notDue.Digest, now.Add(time.Hour))

	r := newTestReclaimer(t, f, q, true)
	rep := r.Tick(context.Background())
	if rep.Err != nil || rep.Abort != "" {
		t.Fatalf("tick: abort=%q err=%v", rep.Abort, rep.Err)
	}
	want := map[digest.Digest]reclaim.Reason{orphan.Digest: reclaim.ReasonUnreferenced, linked.Digest: reclaim.ReasonLinkedElsewhere,
		recent.Digest: reclaim.ReasonRecentlyAccessed, missing: reclaim.ReasonAlreadyGone}
	if len(rep.Decisions) != len(want) {
		t.Fatalf("reviewed %d items, want %d: %+v", len(rep.Decisions), len(want), rep.Decisions)
	}
	for _, d := range rep.Decisions {
		if want[d.Digest] != d.Reason {
			t.Errorf("%s: %s, want %s", d.Digest, d.Reason, want[d.Digest])
		}
	}
	if f.Exists(layout.BlobDataPath(orphan.Digest)) {
		t.Error("orphan blob not deleted")
	}
	for _, d := range []digest.Digest{linked.Digest, recent.Digest, notDue.Digest} {
		if !f.Exists(layout.BlobDataPath(d)) {
			t.Errorf("blob %s deleted", d)
		}
	}
	// Settled in the queue: deleted and linked ones leave, the recent one
	// is due at last access + W, the not-due one is untouched.
	for _, d := range []digest.Digest{orphan.Digest, linked.Digest, missing} {
		if _, ok := q.DueAt(d); ok {
			t.Errorf("%s still queued", d)
		}
	}
	if due, ok := q.DueAt(recent.Digest); !ok || !due.Equal(now.Add(-time.Minute).Add(time.Hour)) {
		t.Errorf("recent blob due %v %v, want last access + W", due, ok)
	}
	if due, _ := q.DueAt(notDue.Digest); !due.Equal(now.Add(time.Hour)) {
		t.Errorf("not-due item moved to %v", due)
	}
	n, bytes := rep.Deleted()
	if n != 2 || bytes != orphan.Size {
		t.Errorf("Deleted() = %d, %d; want 2, %d", n, bytes, orphan.Size)
	}
	st := r.Status(context.Background())
	if st.Deleted != 2 || st.Reviewed != 4 || st.KeptBy["linked_elsewhere"] != 1 || st.KeptBy["recently_accessed"] != 1 ||
		st.DeletedBy["unreferenced"] != 1 || st.QueueLength != 2 || st.Due != 0 || st.BytesFreed != orphan.Size {
		t.Errorf("status = %+v", st)
	}
}

func TestReclaimerKillSwitchDeletesNothing(t *testing.T) {
	f := newFixture(t)
	q, orphan := queuedBlob(f, "orphan")
	r := newTestReclaimer(t, f, q, false)
	if rep := r.Tick(context.Background()); !errors.Is(rep.Err, collector.ErrDisabled) || len(rep.Decisions) != 0 {
		t.Fatalf("disabled tick = %+v", rep)
	}
	if _, err := r.Review(context.Background(), orphan); !errors.Is(err, collector.ErrDisabled) {
		t.Fatalf("disabled Review: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	r.Run(ctx) // returns at once
	if q.Claims != 0 || !f.Exists(layout.BlobDataPath(orphan)) {
		t.Fatalf("disabled reclaimer claimed %d times / deleted the blob", q.Claims)
	}
}

func TestReclaimerAccessAtTheFenceWins(t *testing.T) {
	f := newFixture(t)
	q, orphan := queuedBlob(f, "orphan about to be mounted")
	// A client statted the blob after the check and before the fence.
	f.tr.OnFence = func(o reclaim.Object) { f.tr.Touch(o) }
	rep := newTestReclaimer(t, f, q, true).Tick(context.Background())
	if len(rep.Decisions) != 1 || rep.Decisions[0].Reason != reclaim.ReasonRecentlyAccessed {
		t.Fatalf("decisions = %+v", rep.Decisions)
	}
	if !f.Exists(layout.BlobDataPath(orphan)) {
		t.Fatal("deleted a blob accessed at the last moment")
	}
	if due, ok := q.DueAt(orphan); !ok || !due.After(f.tr.Clock()) {
		t.Fatalf("not re-queued for later: %v %v", due, ok)
	}
}

func TestReclaimerLinkAtTheFenceWins(t *testing.T) {
	f := newFixture(t)
	q, orphan := queuedBlob(f, "orphan about to be linked")
	// A push linked it between the first check and the fence (without an
	// access record, the worst case): the re-check under the fence sees it.
	f.tr.OnFence = func(o reclaim.Object) { f.Put(layout.LayerLinkDir("late", orphan)+"/link", []byte(orphan)) }
	rep := newTestReclaimer(t, f, q, true).Tick(context.Background())
	if len(rep.Decisions) != 1 || rep.Decisions[0].Reason != reclaim.ReasonLinkedElsewhere || !f.Exists(layout.BlobDataPath(orphan)) {
		t.Fatalf("decisions = %+v", rep.Decisions)
	}
}

func TestReclaimerFailuresKeepAndBackOff(t *testing.T) {
	const content = "orphan on a failing disk"
	f := newFixture(t, func(c *collector.Config) {
		c.Driver = gctest.FailingDelete{StorageDriver: c.Driver, Path: layout.BlobDir(digest.FromString(content))}
	})
	q, orphan := queuedBlob(f, content)
	r := newTestReclaimer(t, f, q, true)
	rep := r.Tick(context.Background())
	if len(rep.Decisions) != 1 || rep.Decisions[0].Reason != reclaim.ReasonDeleteFailed || !rep.Failed {
		t.Fatalf("tick = %+v", rep)
	}
	// Left claimed: it comes back after the lease, not at once.
	if due, ok := q.DueAt(orphan); !ok || !due.After(f.tr.Clock()) {
		t.Fatalf("failed item not held for its lease: %v %v", due, ok)
	}
	w1 := r.next(rep)
	w2 := r.next(rep)
	if !(w1 > r.cfg.Interval && w2 > w1 && w2 <= r.cfg.MaxBackoff) {
		t.Fatalf("backoff %v then %v (interval %v, max %v)", w1, w2, r.cfg.Interval, r.cfg.MaxBackoff)
	}
	if w := r.next(TickReport{}); w != r.cfg.Interval {
		t.Fatalf("after a good tick wait %v, want the interval", w)
	}
	q.ClaimErr = gctest.ErrBoom
	if rep := r.Tick(context.Background()); !rep.Failed || !errors.Is(rep.Err, gctest.ErrBoom) {
		t.Fatalf("claim failure: %+v", rep)
	}
	if st := r.Status(context.Background()); st.FailedTicks != 2 || st.LastError == "" {
		t.Fatalf("status = %+v", st)
	}
}

func TestReclaimerRunDrainsAndStops(t *testing.T) {
	f := newFixture(t)
	q := gctest.NewQueue(f.tr.Clock)
	var orphans []digest.Digest
	for i := range 35 { // several batches of 10
		b := f.Blob("orphan " + string(rune('a'+i)))
		orphans = append(orphans, b.Digest)
		q.Add(b.Digest, f.tr.Clock())
	}
	// Every tick reports to Observe: the test looks at the queue then.
	drained := make(chan struct{})
	var once sync.Once
	r, err := f.reclaimer(q, Config{Enabled: true, Interval: 10 * time.Millisecond, Batch: 10, Logf: t.Logf,
		Observe: func(TickReport) {
			if n, _, _ := q.Len(context.Background()); n == 0 {
				once.Do(func() { close(drained) })
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	gctest.Wait(t, drained, "the queue to drain")
	cancel()
	gctest.Wait(t, done, "Run to exit on ctx.Done")
	for _, d := range orphans {
		if f.Exists(layout.BlobDataPath(d)) {
			t.Fatalf("%s not reclaimed", d)
		}
	}
}
