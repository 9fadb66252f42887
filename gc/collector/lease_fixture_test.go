package collector

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
	"github.com/opencontainers/go-digest"
	"github.com/redis/go-redis/v9"

	"github.com/reclaim-registry/reclaim/internal/config"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/redisstate"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/middleware"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

// The fixture of the fence lease tests: the real tracker (miniredis), the
// real middleware and an in-memory driver behind a hook that holds a delete
// as long as a test wants. Redis time moves with FastForward (lease
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
// wires it (registry/wire.go), plus a hook on every Confirm.
type redisTracker struct {
	*redisstate.Tracker

	mu        sync.Mutex
	onConfirm func(o reclaim.Object) // runs before each Confirm; may block
}

func (r *redisTracker) setOnConfirm(f func(reclaim.Object)) {
	r.mu.Lock()
	r.onConfirm = f
	r.mu.Unlock()
}

func (r *redisTracker) Fence(ctx context.Context, o reclaim.Object, window, lease time.Duration) (reclaim.Hold, error) {
	f, err := r.Tracker.Fence(ctx, o, window, lease)
	if err != nil {
		return nil, err
	}
	return redisHold{r: r, o: o, f: f}, nil
}

type redisHold struct {
	r *redisTracker
	o reclaim.Object
	f reclaim.Hold
}

func (h redisHold) Confirm(ctx context.Context) error {
	h.r.mu.Lock()
	f := h.r.onConfirm
	h.r.mu.Unlock()
	if f != nil {
		f(h.o)
	}
	return h.f.Confirm(ctx)
}

func (h redisHold) Release(ctx context.Context) error { return h.f.Release(ctx) }

type leaseFixture struct {
	t   *testing.T
	mr  *miniredis.Miniredis
	env *middleware.Env
	mem storagedriver.StorageDriver // below the hook
	clk *fakeClock
	tr  *redisTracker
	c   *Collector

	before  storagetest.Hook
	mu      sync.Mutex
	deletes []string // deletes that reached mem
}

func newLeaseFixture(t *testing.T, mod ...func(*Config)) *leaseFixture {
	t.Helper()
	f := &leaseFixture{t: t, mr: miniredis.RunT(t), mem: inmemory.New(), clk: newFakeClock()}
	hd := f.before.Driver(f.mem)
	hd.After = func(_ context.Context, m, p string, err error) {
		if m == "Delete" && err == nil {
			f.mu.Lock()
			f.deletes = append(f.deletes, p)
			f.mu.Unlock()
		}
	}
	env, err := middleware.NewEnv(context.Background(), hd, config.Options{
		Redis: redis.UniversalOptions{Addrs: []string{f.mr.Addr()}}, Window: time.Hour, FenceWait: time.Millisecond, FencePoll: time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.Close() })
	f.env = env
	// The epoch was set at real time now; Redis time is three hours on.
	f.mr.SetTime(time.Now().Add(3 * time.Hour))
	f.tr = &redisTracker{Tracker: env.Tracker}
	cfg := Config{Driver: env.Driver, Tracker: f.tr, Links: env.Links, Clock: env.Tracker, Freed: env.Tracker,
		LinkDBComplete: func(context.Context) (bool, error) { return true, nil },
		Context:        middleware.WithoutAccessRecords,
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
	ctx := middleware.WithoutAccessRecords(context.Background())
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
	if err != nil && !layout.IsNotFound(err) {
		f.t.Fatal(err)
	}
	return err == nil
}

// holdDelete makes the first Delete whose path match accepts wait in the
// storage until release is closed (then it runs) or its context ends (then
// onCancel answers; nil fails it with the context's error, as an object
// store's client does). reached gets the path when it arrives.
func (f *leaseFixture) holdDelete(match func(p string) bool, onCancel func(ctx context.Context, p string) error) (reached <-chan string, release chan struct{}) {
	arrived, release := make(chan string, 1), make(chan struct{})
	var once sync.Once
	f.before.Set(f.t, func(ctx context.Context, m, p string) error {
		if m != "Delete" || !match(p) {
			return nil
		}
		first := false
		once.Do(func() { first = true })
		if !first {
			return nil
		}
		arrived <- p
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			if onCancel == nil {
				return ctx.Err()
			}
			return onCancel(ctx, p)
		}
	})
	return arrived, release
}

// hold holds the first Delete of path.
func (f *leaseFixture) hold(path string) (reached <-chan string, release chan struct{}) {
	return f.holdDelete(func(p string) bool { return p == path }, nil)
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

// The two deletes of a collection that destroy something: a link (the
// repository's last reference to a blob) and the blob itself.
type deleteTarget struct {
	name     string
	kind     reclaim.ObjectKind
	dir      func(repo string, d digest.Digest) string
	obj      func(repo string, d digest.Digest) reclaim.Object
	fenceKey func(repo string, d digest.Digest) string // the fence's Redis key
}

var (
	layerTarget = deleteTarget{"layer link", reclaim.KindLayerLink, layout.LayerLinkDir,
		func(repo string, d digest.Digest) reclaim.Object {
			return reclaim.Object{Blob: d, Repo: repo, Kind: reclaim.LinkLayer}
		},
		func(repo string, d digest.Digest) string { return "reclaim:{" + d.String() + "}:f:l:" + repo }}
	blobTarget = deleteTarget{"blob", reclaim.KindBlob, func(_ string, d digest.Digest) string { return layout.BlobDir(d) },
		func(_ string, d digest.Digest) reclaim.Object { return reclaim.Object{Blob: d} },
		func(_ string, d digest.Digest) string { return "reclaim:{" + d.String() + "}:f" }}
)
