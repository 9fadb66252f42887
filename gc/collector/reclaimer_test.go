package collector

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// fakeQueue is an in-memory review queue on the fake tracker's clock.
type fakeQueue struct {
	mu       sync.Mutex
	clock    func() time.Time
	due      map[digest.Digest]time.Time
	leases   map[digest.Digest]int64
	next     int64
	claimErr error
	claims   int
}

func newFakeQueue(clock func() time.Time) *fakeQueue {
	return &fakeQueue{clock: clock, due: map[digest.Digest]time.Time{}, leases: map[digest.Digest]int64{}}
}

func (q *fakeQueue) add(d digest.Digest, due time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.due[d] = due
	delete(q.leases, d)
}

func (q *fakeQueue) Claim(ctx context.Context, n int, lease time.Duration) ([]reclaim.ReviewItem, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.claims++
	if q.claimErr != nil {
		return nil, q.claimErr
	}
	now := q.clock()
	var out []reclaim.ReviewItem
	for d, t := range q.due {
		if len(out) == n {
			break
		}
		if !t.After(now) {
			q.next++
			q.due[d], q.leases[d] = now.Add(lease), q.next
			out = append(out, reclaim.ReviewItem{Blob: d, Due: t, Lease: q.next})
		}
	}
	return out, nil
}

func (q *fakeQueue) Done(ctx context.Context, it reclaim.ReviewItem) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.leases[it.Blob] == it.Lease {
		delete(q.due, it.Blob)
		delete(q.leases, it.Blob)
	}
	return nil
}

func (q *fakeQueue) Requeue(ctx context.Context, it reclaim.ReviewItem, due time.Time) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.leases[it.Blob] == it.Lease {
		q.due[it.Blob] = due
		delete(q.leases, it.Blob)
	}
	return nil
}

func (q *fakeQueue) Len(ctx context.Context) (int64, int64, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	var due int64
	for _, t := range q.due {
		if !t.After(q.clock()) {
			due++
		}
	}
	return int64(len(q.due)), due, nil
}

func (q *fakeQueue) dueAt(d digest.Digest) (time.Time, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	t, ok := q.due[d]
	return t, ok
}

func newTestReclaimer(t *testing.T, f *fixture, q Queue, enabled bool) *Reclaimer {
	t.Helper()
	r, err := NewReclaimer(f.c, q, ReclaimerConfig{Enabled: enabled, Interval: 10 * time.Millisecond, Batch: 10, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestReclaimerDecidesEachItem(t *testing.T) {
	f := newFixture(t)
	q := newFakeQueue(f.tr.clock)
	now := f.tr.clock()

	orphan := f.blob("orphan: upload committed, manifest never came")
	linked := f.layer("app", "still linked by app")
	recent := f.blob("pulled a moment ago")
	f.tr.access[reclaim.Object{Blob: recent.Digest}] = now.Add(-time.Minute)
	missing := digest.FromString("never existed")
	for _, d := range []digest.Digest{orphan.Digest, linked.Digest, recent.Digest, missing} {
		q.add(d, now)
	}
	notDue := f.blob("queued, not due yet")
	q.add(notDue.Digest, now.Add(time.Hour))

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
	if f.exists(layout.BlobDataPath(orphan.Digest)) {
		t.Error("orphan blob not deleted")
	}
	for _, d := range []digest.Digest{linked.Digest, recent.Digest, notDue.Digest} {
		if !f.exists(layout.BlobDataPath(d)) {
			t.Errorf("blob %s deleted", d)
		}
	}
	// Settled in the queue: deleted and linked ones leave, the recent one
	// is due at last access + W, the not-due one is untouched.
	for _, d := range []digest.Digest{orphan.Digest, linked.Digest, missing} {
		if _, ok := q.dueAt(d); ok {
			t.Errorf("%s still queued", d)
		}
	}
	if due, ok := q.dueAt(recent.Digest); !ok || !due.Equal(now.Add(-time.Minute).Add(time.Hour)) {
		t.Errorf("recent blob due %v %v, want last access + W", due, ok)
	}
	if due, _ := q.dueAt(notDue.Digest); !due.Equal(now.Add(time.Hour)) {
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
	if rep := r.Tick(context.Background()); !errors.Is(rep.Err, ErrDisabled) || len(rep.Decisions) != 0 {
		t.Fatalf("disabled tick = %+v", rep)
	}
	if _, err := r.Review(context.Background(), orphan); !errors.Is(err, ErrDisabled) {
		t.Fatalf("disabled Review: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	r.Run(ctx) // returns at once
	if q.claims != 0 || !f.exists(layout.BlobDataPath(orphan)) {
		t.Fatalf("disabled reclaimer claimed %d times / deleted the blob", q.claims)
	}
}

func TestReclaimerAccessAtTheFenceWins(t *testing.T) {
	f := newFixture(t)
	q, orphan := queuedBlob(f, "orphan about to be mounted")
	// A client statted the blob after the check and before the fence.
	f.tr.onFence = func(o reclaim.Object) { f.tr.touch(o) }
	rep := newTestReclaimer(t, f, q, true).Tick(context.Background())
	if len(rep.Decisions) != 1 || rep.Decisions[0].Reason != reclaim.ReasonRecentlyAccessed {
		t.Fatalf("decisions = %+v", rep.Decisions)
	}
	if !f.exists(layout.BlobDataPath(orphan)) {
		t.Fatal("deleted a blob accessed at the last moment")
	}
	if due, ok := q.dueAt(orphan); !ok || !due.After(f.tr.clock()) {
		t.Fatalf("not re-queued for later: %v %v", due, ok)
	}
}

func TestReclaimerLinkAtTheFenceWins(t *testing.T) {
	f := newFixture(t)
	q, orphan := queuedBlob(f, "orphan about to be linked")
	// A push linked it between the first check and the fence (without an
	// access record, the worst case): the re-check under the fence sees it.
	f.tr.onFence = func(o reclaim.Object) { f.put(layout.LayerLinkDir("late", orphan)+"/link", []byte(orphan)) }
	rep := newTestReclaimer(t, f, q, true).Tick(context.Background())
	if len(rep.Decisions) != 1 || rep.Decisions[0].Reason != reclaim.ReasonLinkedElsewhere || !f.exists(layout.BlobDataPath(orphan)) {
		t.Fatalf("decisions = %+v", rep.Decisions)
	}
}

func TestReclaimerFailuresKeepAndBackOff(t *testing.T) {
	f := newFixture(t)
	q, orphan := queuedBlob(f, "orphan on a failing disk")
	f.c.driver = failingDelete{StorageDriver: f.d, path: layout.BlobDir(orphan)}
	r := newTestReclaimer(t, f, q, true)
	rep := r.Tick(context.Background())
	if len(rep.Decisions) != 1 || rep.Decisions[0].Reason != reclaim.ReasonDeleteFailed || !rep.Failed {
		t.Fatalf("tick = %+v", rep)
	}
	// Left claimed: it comes back after the lease, not at once.
	if due, ok := q.dueAt(orphan); !ok || !due.After(f.tr.clock()) {
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
	q.claimErr = errBoom
	if rep := r.Tick(context.Background()); !rep.Failed || !errors.Is(rep.Err, errBoom) {
		t.Fatalf("claim failure: %+v", rep)
	}
	if st := r.Status(context.Background()); st.FailedTicks != 2 || st.LastError == "" {
		t.Fatalf("status = %+v", st)
	}
}

func TestReclaimerRunDrainsAndStops(t *testing.T) {
	f := newFixture(t)
	q := newFakeQueue(f.tr.clock)
	var orphans []digest.Digest
	for i := range 35 { // several batches of 10
		b := f.blob("orphan " + string(rune('a'+i)))
		orphans = append(orphans, b.Digest)
		q.add(b.Digest, f.tr.clock())
	}
	// Every tick reports to Observe: the test looks at the queue then.
	drained := make(chan struct{})
	var once sync.Once
	r, err := NewReclaimer(f.c, q, ReclaimerConfig{Enabled: true, Interval: 10 * time.Millisecond, Batch: 10, Logf: t.Logf,
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
	wait(t, drained, "the queue to drain")
	cancel()
	wait(t, done, "Run to exit on ctx.Done")
	for _, d := range orphans {
		if f.exists(layout.BlobDataPath(d)) {
			t.Fatalf("%s not reclaimed", d)
		}
	}
}
