package gc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
	"github.com/opencontainers/go-digest"
	"github.com/redis/go-redis/v9"

	"github.com/reclaim-registry/reclaim/internal/config"
	"github.com/reclaim-registry/reclaim/storage"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/linkdb"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
	"github.com/reclaim-registry/reclaim/storage/tracker"
)

// The fence lease against slow deletes, with the real tracker (miniredis),
// the real middleware and an in-memory driver behind a hook that holds a
// delete as long as a test wants. Redis time moves with FastForward (lease
// expiry), the collector's renewal timer with a fake clock: no sleeps.

const testLease = 10 * time.Minute

// fakeClock is a leaseClock the test moves by hand.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters map[*fakeWaiter]bool
	changed chan struct{} // closed and replaced on every change of waiters
}

type fakeWaiter struct {
	at time.Time
	c  chan struct{}
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Now(), waiters: map[*fakeWaiter]bool{}, changed: make(chan struct{})}
}

func (c *fakeClock) notify() { close(c.changed); c.changed = make(chan struct{}) }

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *fakeClock) Wait(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	c.mu.Lock()
	w := &fakeWaiter{at: c.now.Add(d), c: make(chan struct{})}
	c.waiters[w] = true
	c.notify()
	c.mu.Unlock()
	select {
	case <-w.c:
		return true
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.waiters, w)
		c.notify()
		c.mu.Unlock()
		return false
	}
}

// Advance moves the clock and wakes the waiters that are due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for w := range c.waiters {
		if !w.at.After(c.now) {
			close(w.c)
			delete(c.waiters, w)
		}
	}
	c.notify()
}

// awaitWaiters waits until n goroutines wait on the clock; false after a
// generous bound (the code under test never got there).
func (c *fakeClock) awaitWaiters(n int) bool {
	bound := time.After(10 * time.Second)
	for {
		c.mu.Lock()
		got, ch := len(c.waiters), c.changed
		c.mu.Unlock()
		if got == n {
			return true
		}
		select {
		case <-ch:
		case <-bound:
			return false
		}
	}
}

// redisTracker is gc's Tracker on the storage tracker, as the registry
// wires it (registry/gcapi_storage.go), plus a hook on every Confirm.
type redisTracker struct {
	t *tracker.Tracker

	mu        sync.Mutex
	onConfirm func(o Object) // runs before each Confirm; may block
}

func gcErr(err error) error {
	for _, m := range []struct{ from, to error }{
		{layout.ErrFenced, ErrFenced},
		{layout.ErrRecentlyAccessed, ErrRecentlyAccessed},
		{layout.ErrFenceLost, ErrFenceLost},
		{layout.ErrNotRecording, ErrNotRecording},
		{layout.ErrRepositoryBusy, ErrRepositoryBusy},
		{layout.ErrTrackerUnavailable, ErrTrackerUnavailable},
	} {
		if errors.Is(err, m.from) {
			return fmt.Errorf("%w: %w", m.to, err)
		}
	}
	return err
}

func toStorage(o Object) layout.Object {
	return layout.Object{Blob: o.Blob, Repo: o.Repo, Kind: layout.LinkKind(o.Kind)}
}

func (r *redisTracker) setOnConfirm(f func(Object)) { r.mu.Lock(); r.onConfirm = f; r.mu.Unlock() }

func (r *redisTracker) RecordingSince(ctx context.Context) (time.Time, error) {
	t, err := r.t.RecordingSince(ctx)
	return t, gcErr(err)
}

func (r *redisTracker) LastAccess(ctx context.Context, o Object) (time.Time, bool, error) {
	t, ok, err := r.t.LastAccess(ctx, toStorage(o))
	return t, ok, gcErr(err)
}

func (r *redisTracker) Fence(ctx context.Context, o Object, window, lease time.Duration) (Hold, error) {
	f, err := r.t.Fence(ctx, toStorage(o), window, lease)
	if err != nil {
		return nil, gcErr(err)
	}
	return redisHold{r: r, o: o, f: f, lease: lease}, nil
}

func (r *redisTracker) LockRepository(ctx context.Context, repo string, lease time.Duration) (context.Context, func(), error) {
	held, unlock, err := r.t.LockRepository(ctx, repo, lease)
	return held, unlock, gcErr(err)
}

func (r *redisTracker) Now(ctx context.Context) (time.Time, error) {
	t, err := r.t.Now(ctx)
	return t, gcErr(err)
}

type redisHold struct {
	r     *redisTracker
	o     Object
	f     *tracker.Fence
	lease time.Duration
}

func (h redisHold) Confirm(ctx context.Context) error {
	h.r.mu.Lock()
	f := h.r.onConfirm
	h.r.mu.Unlock()
	if f != nil {
		f(h.o)
	}
	return gcErr(h.r.t.Confirm(ctx, h.f, h.lease))
}

func (h redisHold) Release(ctx context.Context) error { return gcErr(h.r.t.Release(ctx, h.f)) }

type envLinks struct{ l *linkdb.ReverseLinks }

func (a envLinks) List(ctx context.Context, blob digest.Digest) ([]RepoLink, error) {
	ls, err := a.l.List(ctx, blob)
	out := make([]RepoLink, len(ls))
	for i, l := range ls {
		out[i] = RepoLink{Repo: l.Repo, Kind: LinkKind(l.Kind)}
	}
	return out, err
}

type leaseFixture struct {
	t   *testing.T
	mr  *miniredis.Miniredis
	env *storage.Env
	mem storagedriver.StorageDriver // below the hook
	clk *fakeClock
	tr  *redisTracker
	c   *Collector

	mu      sync.Mutex
	before  func(ctx context.Context, method, path string) error
	deletes []string // deletes that reached mem
}

func newLeaseFixture(t *testing.T, mod ...func(*Config)) *leaseFixture {
	t.Helper()
	f := &leaseFixture{t: t, mr: miniredis.RunT(t), mem: inmemory.New(), clk: newFakeClock()}
	hd := &storagetest.HookDriver{StorageDriver: f.mem,
		Before: func(ctx context.Context, m, p string) error {
			f.mu.Lock()
			b := f.before
			f.mu.Unlock()
			if b == nil {
				return nil
			}
			return b(ctx, m, p)
		},
		After: func(_ context.Context, m, p string, err error) {
			if m == "Delete" && err == nil {
				f.mu.Lock()
				f.deletes = append(f.deletes, p)
				f.mu.Unlock()
			}
		}}
	env, err := storage.NewEnv(context.Background(), hd, config.Options{
		Redis: redis.UniversalOptions{Addrs: []string{f.mr.Addr()}}, Window: time.Hour, FenceWait: time.Millisecond, FencePoll: time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.Close() })
	f.env = env
	// The epoch was set at real time now; Redis time is three hours on.
	f.mr.SetTime(time.Now().Add(3 * time.Hour))
	f.tr = &redisTracker{t: env.Tracker}
	cfg := Config{Driver: env.Driver, Tracker: f.tr, Links: envLinks{env.Links},
		LinkDBComplete: func(context.Context) (bool, error) { return true, nil },
		Context:        storage.WithoutAccessRecords,
		Window:         time.Hour, FenceLease: testLease,
		// Long enough that no FastForward of these tests expires it.
		LockLease: 24 * time.Hour}
	for _, m := range mod {
		m(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.clock = f.clk
	f.c = c
	return f
}

func (f *leaseFixture) setBefore(b func(ctx context.Context, method, path string) error) {
	f.mu.Lock()
	f.before = b
	f.mu.Unlock()
}

func (f *leaseFixture) deletesSoFar() int { f.mu.Lock(); defer f.mu.Unlock(); return len(f.deletes) }

func (f *leaseFixture) deletesSince(n int) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.deletes[n:]...)
}

// layer writes a blob and repo's layer link to it, as a push through the
// middleware would (reverse link first), recording no access.
func (f *leaseFixture) layer(repo, content string) digest.Digest {
	f.t.Helper()
	ctx := storage.WithoutAccessRecords(context.Background())
	d := digest.FromString(content)
	if err := f.env.Driver.PutContent(ctx, layout.BlobDataPath(d), []byte(content)); err != nil {
		f.t.Fatal(err)
	}
	if err := f.env.Driver.PutContent(ctx, layout.LayerLinkPath(repo, d), []byte(d)); err != nil {
		f.t.Fatal(err)
	}
	return d
}

func (f *leaseFixture) exists(p string) bool {
	f.t.Helper()
	_, err := f.mem.Stat(context.Background(), p)
	if err != nil && !isNotFound(err) {
		f.t.Fatal(err)
	}
	return err == nil
}

// hold makes the first Delete of path wait until release is closed or its
// context ends (then it fails with the context's error, as an object
// store's client does). reached is closed when it arrives.
func (f *leaseFixture) hold(path string) (reached chan struct{}, release chan struct{}) {
	reached, release = make(chan struct{}), make(chan struct{})
	var once sync.Once
	f.setBefore(func(ctx context.Context, m, p string) error {
		if m != "Delete" || p != path {
			return nil
		}
		first := false
		once.Do(func() { first = true })
		if !first {
			return nil
		}
		close(reached)
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	return reached, release
}

type collected struct {
	rep *Report
	err error
}

func (f *leaseFixture) start(repo string) chan collected {
	out := make(chan collected, 1)
	go func() {
		rep, err := f.c.Collect(context.Background(), repo, RunOptions{})
		out <- collected{rep, err}
	}()
	return out
}

func wait[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// The two deletes of a collection that destroy something: a link (the
// repository's last reference to a blob) and the blob itself.
type deleteTarget struct {
	name string
	kind ObjectKind
	dir  func(repo string, d digest.Digest) string
	obj  func(repo string, d digest.Digest) layout.Object
}

var deleteTargets = []deleteTarget{
	{"layer link", KindLayerLink, layerLinkDir,
		func(repo string, d digest.Digest) layout.Object {
			return layout.Object{Blob: d, Repo: repo, Kind: layout.LinkLayer}
		}},
	{"blob", KindBlob, func(_ string, d digest.Digest) string { return blobDir(d) },
		func(_ string, d digest.Digest) layout.Object { return layout.Object{Blob: d} }},
}

// A delete held in the storage for longer than the fence lease keeps its
// fence: a writer is still refused after the lease ran out twice over,
// because the collector renews the fence while the delete runs.
func TestSlowDeleteKeepsItsFence(t *testing.T) {
	for _, tc := range deleteTargets {
		t.Run(tc.name, func(t *testing.T) {
			f := newLeaseFixture(t)
			const repo = "slow"
			d := f.layer(repo, "stray "+tc.name)
			reached, release := f.hold(tc.dir(repo, d))
			done := f.start(repo)
			wait(t, reached, "the delete")

			// Three renewal periods pass on the collector's clock while
			// Redis time runs 2.4 leases past the confirmation right before
			// the delete.
			renewing := f.clk.awaitWaiters(1) // false: nothing renews, the lease just runs out
			renewed := 0
			for range 3 {
				f.mr.FastForward(testLease * 6 / 10)
				f.clk.Advance(testLease / 3)
				if renewing = renewing && f.clk.awaitWaiters(1); renewing {
					renewed++
				}
			}
			f.mr.FastForward(testLease * 6 / 10)
			err := f.env.Tracker.Touch(context.Background(), tc.obj(repo, d))
			if !errors.Is(err, layout.ErrFenced) {
				close(release)
				wait(t, done, "the run")
				t.Fatalf("a writer touched %s while its delete ran, 2.4 leases after it was confirmed: %v (%d renewals)", tc.name, err, renewed)
			}
			close(release)
			res := wait(t, done, "the run")
			if res.err != nil {
				t.Fatal(res.err)
			}
			if got := reasonOf(res.rep, tc.kind, d); got != Unreferenced {
				t.Fatalf("%s: %v, want unreferenced\n%s %v", tc.name, got, summary(res.rep), res.rep.Decisions())
			}
			if f.exists(tc.dir(repo, d)) {
				t.Fatalf("%s not deleted", tc.name)
			}
		})
	}
}

// A delete whose fence is lost while it runs is called off at once: the
// object is kept with a typed reason, and nothing is deleted after the
// loss, so a writer that passed the fence meanwhile keeps what it wrote.
func TestDeleteThatLosesItsFenceIsCancelled(t *testing.T) {
	ctx := context.Background()

	t.Run("lease ran out while the renewal stalled", func(t *testing.T) {
		// The blob: the delete that would break an image a writer links.
		f := newLeaseFixture(t)
		const repo = "stall"
		d := f.layer(repo, "stray blob")
		reached, release := f.hold(blobDir(d))
		done := f.start(repo)
		wait(t, reached, "the blob delete")
		stalled, unstall := make(chan struct{}), make(chan struct{})
		var once sync.Once
		f.tr.setOnConfirm(func(Object) { once.Do(func() { close(stalled); <-unstall }) })
		renewing := f.clk.awaitWaiters(1)
		if renewing {
			f.clk.Advance(testLease / 3)
			wait(t, stalled, "a renewal")
		}
		f.mr.FastForward(testLease + time.Second) // the renewal is too late
		n := f.deletesSoFar()
		// A writer passes the expired fence and links the blob into
		// another repository (reverse link, then forward link).
		if err := f.env.Driver.PutContent(ctx, layout.LayerLinkPath("writer", d), []byte(d)); err != nil {
			t.Fatalf("writer: %v", err)
		}
		close(unstall)
		if !renewing {
			t.Error("the delete runs and nothing renews its fence")
			close(release) // the storage answers at last
		}
		res := wait(t, done, "the run")
		if res.err != nil {
			t.Fatal(res.err)
		}
		if got := reasonOf(res.rep, KindBlob, d); got != FenceLost {
			t.Fatalf("blob: %v, want fence_lost\n%v", got, res.rep.Decisions())
		}
		if after := f.deletesSince(n); len(after) > 0 {
			t.Fatalf("deleted after the fence was lost: %v", after)
		}
		for _, p := range []string{layout.BlobDataPath(d), layout.LayerLinkPath("writer", d), layout.ReverseLinkPath(d, "writer", layout.LinkLayer)} {
			if !f.exists(p) {
				t.Fatalf("%s is gone: the writer's image is broken", p)
			}
		}
	})

	t.Run("fence key deleted", func(t *testing.T) {
		// The layer link: Redis lost the key (failover, eviction, a hand).
		f := newLeaseFixture(t)
		const repo = "lost"
		d := f.layer(repo, "stray link")
		reached, release := f.hold(layerLinkDir(repo, d))
		done := f.start(repo)
		wait(t, reached, "the link delete")
		renewing := f.clk.awaitWaiters(1)
		n := f.deletesSoFar()
		f.mr.Del("reclaim:{" + d.String() + "}:f:l:" + repo)
		if f.clk.Advance(testLease / 3); !renewing {
			t.Error("the delete runs and nothing renews its fence")
			close(release)
		}
		res := wait(t, done, "the run")
		if res.err != nil {
			t.Fatal(res.err)
		}
		if got := reasonOf(res.rep, KindLayerLink, d); got != FenceLost {
			t.Fatalf("layer link: %v, want fence_lost\n%v", got, res.rep.Decisions())
		}
		if after := f.deletesSince(n); len(after) > 0 {
			t.Fatalf("deleted after the fence was lost: %v", after)
		}
		if !f.exists(layout.LayerLinkPath(repo, d)) || !f.exists(layout.ReverseLinkPath(d, repo, layout.LinkLayer)) || !f.exists(layout.BlobDataPath(d)) {
			t.Fatal("link, reverse link or blob gone after a cancelled delete")
		}
	})

	t.Run("driver ignores the cancel", func(t *testing.T) {
		// A driver that finishes the forward delete anyway (the filesystem
		// driver ignores contexts): the reverse link stays, a leak.
		f := newLeaseFixture(t)
		const repo = "deaf"
		d := f.layer(repo, "stray deaf")
		reached, release := make(chan struct{}), make(chan struct{})
		var once sync.Once
		f.setBefore(func(ctx context.Context, m, p string) error {
			if m == "Delete" && p == layerLinkDir(repo, d) {
				once.Do(func() {
					close(reached)
					select {
					case <-ctx.Done():
					case <-release:
					}
				})
			}
			return nil
		})
		done := f.start(repo)
		wait(t, reached, "the link delete")
		renewing := f.clk.awaitWaiters(1)
		f.mr.Del("reclaim:{" + d.String() + "}:f:l:" + repo)
		if f.clk.Advance(testLease / 3); !renewing {
			t.Error("the delete runs and nothing renews its fence")
			close(release)
		}
		res := wait(t, done, "the run")
		if res.err != nil {
			t.Fatal(res.err)
		}
		if got := reasonOf(res.rep, KindLayerLink, d); got != FenceLost {
			t.Fatalf("layer link: %v, want fence_lost\n%v", got, res.rep.Decisions())
		}
		if f.exists(layout.LayerLinkPath(repo, d)) {
			t.Fatal("the test driver did not finish the delete")
		}
		if !f.exists(layout.ReverseLinkPath(d, repo, layout.LinkLayer)) {
			t.Fatal("the reverse link was removed after the delete was called off: nothing may be deleted after the fence was lost")
		}
		if !f.exists(layout.BlobDataPath(d)) {
			t.Fatal("blob deleted")
		}
	})

	t.Run("blob delete ran but its call failed", func(t *testing.T) {
		// An object store executed the delete, but the client gave up (the
		// cancel reached it first): the data is gone and the call failed.
		// The blob's tombstone must be there all the same, or a stale
		// descriptor cache would vouch for the missing data to the next
		// push.
		f := newLeaseFixture(t)
		const repo = "late"
		d := f.layer(repo, "stray late")
		reached, release := make(chan struct{}), make(chan struct{})
		var once sync.Once
		f.setBefore(func(ctx context.Context, m, p string) error {
			var err error
			if m == "Delete" && p == blobDir(d) {
				once.Do(func() {
					close(reached)
					select {
					case <-ctx.Done():
						err = f.mem.Delete(context.Background(), p)
						if err == nil {
							err = ctx.Err()
						}
					case <-release:
					}
				})
			}
			return err
		})
		done := f.start(repo)
		wait(t, reached, "the blob delete")
		renewing := f.clk.awaitWaiters(1)
		f.mr.Del("reclaim:{" + d.String() + "}:f")
		if f.clk.Advance(testLease / 3); !renewing {
			t.Error("the delete runs and nothing renews its fence")
			close(release)
		}
		res := wait(t, done, "the run")
		if res.err != nil {
			t.Fatal(res.err)
		}
		if got := reasonOf(res.rep, KindBlob, d); got != FenceLost {
			t.Fatalf("blob: %v, want fence_lost\n%v", got, res.rep.Decisions())
		}
		if f.exists(layout.BlobDataPath(d)) {
			t.Fatal("the test driver did not delete the data")
		}
		if !f.mr.Exists("reclaim:{" + d.String() + "}:gone") {
			t.Fatal("blob data gone without a tombstone")
		}
	})

	t.Run("redis unreachable until the deadline", func(t *testing.T) {
		f := newLeaseFixture(t)
		const repo = "dark"
		d := f.layer(repo, "stray dark")
		reached, release := f.hold(blobDir(d))
		done := f.start(repo)
		wait(t, reached, "the blob delete")
		renewing := f.clk.awaitWaiters(1)
		n := f.deletesSoFar()
		f.mr.SetError("LOADING redis is loading the dataset in memory")
		f.clk.Advance(testLease / 3) // the renewal fails
		if renewing = renewing && f.clk.awaitWaiters(1); !renewing {
			t.Error("the delete runs and nothing renews its fence")
			close(release)
		}
		f.clk.Advance(testLease/2 - testLease/3) // half a lease since the last confirmation
		res := wait(t, done, "the run")
		f.mr.SetError("")
		if res.err != nil {
			t.Fatal(res.err)
		}
		if got := reasonOf(res.rep, KindBlob, d); got != DeleteTimeout {
			t.Fatalf("blob: %v, want delete_timeout\n%v", got, res.rep.Decisions())
		}
		if after := f.deletesSince(n); len(after) > 0 {
			t.Fatalf("deleted after the deadline: %v", after)
		}
		if !f.exists(layout.BlobDataPath(d)) {
			t.Fatal("blob deleted after its deadline")
		}
	})
}

// renewalCounter signals every renewal of one lock key.
type renewalCounter struct {
	key string
	c   chan struct{}
}

func (r *renewalCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *renewalCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (r *renewalCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		name := strings.ToLower(cmd.Name())
		if name == "evalsha" || name == "eval" {
			for _, a := range cmd.Args() {
				if a == r.key && len(cmd.Args()) == 6 { // evalsha sha 1 key token lease: a renewal (a release has no lease)
					select {
					case r.c <- struct{}{}:
					default:
					}
				}
			}
		}
		return err
	}
}

// A run that loses its repository lock (expired, taken away) stops: its
// context is cancelled, the delete in progress is called off, nothing is
// deleted after the loss, and the run says why.
func TestLostRunLockStopsTheRun(t *testing.T) {
	f := newLeaseFixture(t, func(c *Config) { c.LockLease = 300 * time.Millisecond })
	const repo = "locked"
	a := f.layer(repo, "stray a")
	b := f.layer(repo, "stray b")
	first := make(chan string, 1)
	cancelled, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	f.setBefore(func(ctx context.Context, m, p string) error {
		if m != "Delete" || !strings.Contains(p, "/_layers/") {
			return nil
		}
		held := false
		once.Do(func() { held = true })
		if !held {
			return nil
		}
		first <- p
		select {
		case <-ctx.Done():
			close(cancelled)
			return ctx.Err()
		case <-release:
			return nil
		}
	})
	rc := &renewalCounter{key: "reclaim:run:" + repo, c: make(chan struct{}, 16)}
	f.env.Tracker.Client().AddHook(rc)
	done := f.start(repo)
	wait(t, first, "the first link delete")
	n := f.deletesSoFar()
	for len(rc.c) > 0 {
		<-rc.c
	}
	f.mr.Del("reclaim:run:" + repo) // the lock is gone (expired, or an operator)
	renewals := 0
	for stopped := false; !stopped; {
		select {
		case <-cancelled:
			stopped = true
		case <-rc.c:
			if renewals++; renewals >= 3 {
				t.Errorf("the lock was lost %d renewals ago and the run goes on", renewals)
				close(release) // the storage answers at last
				stopped = true
			}
		case <-time.After(30 * time.Second):
			t.Fatal("no renewal and no cancellation")
		}
	}
	res := wait(t, done, "the run")
	if res.rep != nil {
		t.Logf("decisions: %v; errors: %v", res.rep.Decisions(), res.rep.Errors)
	}
	if !errors.Is(res.err, ErrLockLost) {
		t.Fatalf("run error %v, want ErrLockLost", res.err)
	}
	if res.rep == nil || res.rep.Status != "failed" {
		t.Fatalf("report %+v, want status failed", res.rep)
	}
	if after := f.deletesSince(n); len(after) > 0 {
		t.Fatalf("deleted after the lock was lost: %v", after)
	}
	for _, d := range []digest.Digest{a, b} {
		if !f.exists(layout.LayerLinkPath(repo, d)) || !f.exists(layout.BlobDataPath(d)) {
			t.Fatalf("%s deleted by a run that had lost its lock", d)
		}
		if r := reasonOf(res.rep, KindLayerLink, d); r.Deletes() {
			t.Fatalf("%s reported %v", d, r)
		}
	}
}
