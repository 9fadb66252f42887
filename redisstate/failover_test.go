package redisstate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/redis/go-redis/v9"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
	"github.com/reclaim-registry/reclaim/storage/storagetest/redistest"
)

// Failover loses the writes a master acknowledged but had not replicated.
// These tests kill a master (Redis Cluster: its replica is promoted;
// Sentinel: the sentinels promote the replica) while a registry records
// accesses, after the old master acknowledged one access it never
// replicated, and show that GC cannot act on the loss: its first fence on
// the promoted replica moves the epoch (fencecheck.go) and is refused, and
// every fence is refused until a full window has been recorded again, by
// which time the lost access is older than the window.
//
// RECLAIM_TEST_FAILOVER_LONG=1 runs the long form: every master of the
// cluster is killed in turn, each under load.

// failoverWindow is GC's protection window W in these tests.
const failoverWindow = 2 * time.Second

// failoverRig is a Redis with a master to kill: a cluster or a sentinel.
type failoverRig struct {
	name       string
	client     func(t *testing.T) redis.UniversalClient
	masterFor  func(ctx context.Context, key string) (string, error)
	replicaOf  func(ctx context.Context, master string) (string, error)
	kill       func(addr string)
	waitMaster func(ctx context.Context, addr string) error
}

func clusterRig(t *testing.T) failoverRig {
	c := redistest.StartCluster(t)
	return failoverRig{
		name:       "cluster",
		client:     func(t *testing.T) redis.UniversalClient { return c.Client(t) },
		masterFor:  c.MasterFor,
		replicaOf:  c.ReplicaOf,
		kill:       c.Kill,
		waitMaster: c.WaitMaster,
	}
}

func sentinelRig(t *testing.T) failoverRig {
	s := redistest.StartSentinel(t)
	return failoverRig{
		name:      "sentinel",
		client:    func(t *testing.T) redis.UniversalClient { return s.Client(t) },
		masterFor: func(ctx context.Context, _ string) (string, error) { return s.Master(ctx) },
		replicaOf: func(context.Context, string) (string, error) { return s.Replica(), nil },
		kill:      s.Kill,
		waitMaster: func(ctx context.Context, addr string) error {
			return s.WaitMaster(ctx, addr)
		},
	}
}

// With the registry recording under load through the failover.
func TestFailoverCluster(t *testing.T)  { runFailover(t, clusterRig(t), 1, true) }
func TestFailoverSentinel(t *testing.T) { runFailover(t, sentinelRig(t), 1, true) }

// With no other process: nothing but GC's own fence can notice the
// failover before GC's next tick.
func TestFailoverClusterFenceSeesIt(t *testing.T) { runFailover(t, clusterRig(t), 1, false) }

func TestFailoverClusterLong(t *testing.T) {
	if os.Getenv("RECLAIM_TEST_FAILOVER_LONG") == "" {
		t.Skip("set RECLAIM_TEST_FAILOVER_LONG=1 to fail over every master of a cluster in turn")
	}
	runFailover(t, clusterRig(t), 3, true)
}

// failoverEnv is one registry process and one GC process on the rig.
type failoverEnv struct {
	rig    failoverRig
	load   bool     // the registry records (and ticks) through the failover
	reg    *Tracker // records accesses, ticks every second
	gc     *Tracker // fences; ticks only when told
	c      redis.UniversalClient
	killed map[string]bool
}

func runFailover(t *testing.T, rig failoverRig, rounds int, load bool) {
	newTr := func() *Tracker {
		tr, err := NewTracker(rig.client(t), TrackerOptions{Prefix: "reclaim:"})
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	e := &failoverEnv{rig: rig, load: load, reg: newTr(), gc: newTr(), killed: map[string]bool{}}
	e.c = e.gc.Client()
	for round := 1; round <= rounds; round++ {
		tl := e.round(t, round)
		t.Logf("failover timeline (%s, round %d): kill t0; promoted t1 = t0+%v; epoch moved t2 = t0+%v (%s); "+
			"first fence allowed t3 = t0+%v (W = %v); touches during the round: %d recorded, %d refused retryably",
			rig.name, round, tl.t1.Sub(tl.t0).Round(time.Millisecond), tl.t2.Sub(tl.t0).Round(time.Millisecond), tl.by,
			tl.t3.Sub(tl.t0).Round(time.Millisecond), failoverWindow, tl.ok, tl.unavailable)
	}
}

type timeline struct {
	t0, t1, t2, t3  time.Time
	reason          LossReason
	by              string
	ok, unavailable int64
}

// round kills the master that holds a blob's fresh, unreplicated access
// record and checks that GC never trusts the loss.
func (e *failoverEnv) round(t *testing.T, round int) timeline {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	x, master, replica := e.pickBlob(ctx, t, round)
	e.trusted(ctx, t, round)
	lost := e.loseAccess(ctx, t, x, master)
	var load *touching
	if e.load {
		load = startTouching(e.reg)
	}
	tl := timeline{t0: time.Now()}
	e.rig.kill(master)
	e.killed[master] = true
	if err := e.rig.waitMaster(ctx, replica); err != nil {
		t.Fatal(err)
	}
	tl.t1 = time.Now()
	e.requireLost(ctx, t, x)
	// GC's first fence after the promotion, before its own next tick.
	if f, err := e.gc.fence(ctx, reclaim.Object{Blob: x}, failoverWindow, time.Minute); !errors.Is(err, reclaim.ErrNotRecording) {
		_ = e.gc.Release(ctx, f)
		t.Fatalf("GC's fence on %s, whose access the failover lost: %v; want ErrNotRecording (a wrong delete otherwise)", x, err)
	}
	since, err := e.gc.RecordingSince(ctx)
	if err != nil || !since.After(lost) {
		t.Fatalf("after the failover the epoch is %v (%v), not past the lost access at %v", since, err, lost)
	}
	tl.t2, tl.by = since, "moved by the registry's touches or ticks"
	if l := e.gc.RedisHealth().LastLoss; l != nil && l.At.After(tl.t0) {
		tl.by = "moved by GC's fence: " + l.Reason.String()
	} else if !e.load {
		t.Fatalf("only GC's fence could see the failover, and it did not: %+v", l)
	}
	tl.t3 = e.firstFence(ctx, t, lost)
	if load != nil {
		tl.ok, tl.unavailable = load.stop(t)
	}
	return tl
}

// pickBlob returns a blob whose records live on a master not killed yet
// that has a live replica.
func (e *failoverEnv) pickBlob(ctx context.Context, t *testing.T, round int) (digest.Digest, string, string) {
	for i := range 1000 {
		x := digest.FromString(fmt.Sprintf("failover %d %d", round, i))
		m, err := e.rig.masterFor(ctx, e.gc.accessKey(reclaim.Object{Blob: x}))
		if err != nil {
			t.Fatal(err)
		}
		if e.killed[m] {
			continue
		}
		if r, err := e.rig.replicaOf(ctx, m); err == nil {
			return x, m, r
		}
	}
	t.Fatal("no master with a replica left")
	return "", "", ""
}

// trusted lets the GC process tick, makes the epoch a window old (the
// test clock), waits until the epoch is replicated, and shows that GC
// trusts the records now: a fence on a blob nobody accessed is taken.
func (e *failoverEnv) trusted(ctx context.Context, t *testing.T, round int) {
	t.Helper()
	if err := e.gc.StartRecording(ctx); err != nil {
		t.Fatal(err)
	}
	storagetest.Age(t, e.c, e.gc.opts.Prefix, 2*failoverWindow)
	e.replicated(ctx, t, e.gc.sinceKey())
	y := reclaim.Object{Blob: digest.FromString(fmt.Sprintf("never accessed %d", round))}
	f, err := e.gc.fence(ctx, y, failoverWindow, time.Minute)
	if err != nil {
		t.Fatalf("before the failover GC does not trust the records: %v", err)
	}
	if err := e.gc.Release(ctx, f); err != nil {
		t.Fatal(err)
	}
}

// replicated waits until the master of key has replicated every write
// (to its replica, if it still has one: a promoted one has none).
func (e *failoverEnv) replicated(ctx context.Context, t *testing.T, key string) {
	t.Helper()
	m, err := e.rig.masterFor(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.rig.replicaOf(ctx, m); err != nil {
		return
	}
	c := redis.NewClient(&redis.Options{Addr: m})
	defer c.Close()
	if n, err := c.Wait(ctx, 1, 10*time.Second).Result(); err != nil || n < 1 {
		t.Fatalf("WAIT on %s: %d replicas, %v", m, n, err)
	}
}

// unreplicatedTouch records an access the way touch does, but on the
// master only (effects not replicated): an access the master acknowledged
// and a failover loses.
var unreplicatedTouch = redis.NewScript(`
redis.set_repl(redis.REPL_NONE)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('SET', KEYS[1], now, 'PX', ARGV[1])
return now
`)

// loseAccess records x's access on master only and shows GC keeps x while
// the record is there. It returns the lost access time.
func (e *failoverEnv) loseAccess(ctx context.Context, t *testing.T, x digest.Digest, master string) time.Time {
	t.Helper()
	key := e.gc.accessKey(reclaim.Object{Blob: x})
	ms, err := unreplicatedTouch.Run(ctx, e.c, []string{key}, e.gc.opts.AccessTTL.Milliseconds()).Int64()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.gc.Fence(ctx, reclaim.Object{Blob: x}, failoverWindow, time.Minute); !errors.Is(err, reclaim.ErrRecentlyAccessed) {
		t.Fatalf("fence on %s just accessed on %s: %v, want ErrRecentlyAccessed", x, master, err)
	}
	return time.UnixMilli(ms)
}

// requireLost waits until GC's client reaches the promoted replica (a
// read, no tick) and shows that x's access record is gone with the old
// master: the test really lost a write.
func (e *failoverEnv) requireLost(ctx context.Context, t *testing.T, x digest.Digest) {
	t.Helper()
	var ok bool
	err := waitUntil(ctx, func() error {
		if cc, isCluster := e.c.(*redis.ClusterClient); isCluster {
			cc.ReloadState(ctx)
		}
		var err error
		_, ok, err = e.gc.LastAccess(ctx, reclaim.Object{Blob: x})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if ok {
		t.Fatalf("%s's unreplicated access record survived the failover: nothing was lost", x)
	}
}

// firstFence lets GC tick (every second) and tries a fence every 100 ms
// until one is taken: the first delete allowed again. Every refusal before
// must be a retryable one, and the fence taken must rest on an epoch newer
// than the lost access and a full window old.
func (e *failoverEnv) firstFence(ctx context.Context, t *testing.T, lost time.Time) time.Time {
	t.Helper()
	tctx, stop := context.WithCancel(ctx)
	defer stop()
	go e.gc.KeepRecording(tctx, time.Second)
	for i := 0; ; i++ {
		o := reclaim.Object{Blob: digest.FromString(fmt.Sprintf("after the failover %d %v", i, lost))}
		f, err := e.gc.fence(ctx, o, failoverWindow, time.Minute)
		if err == nil {
			at := time.Now()
			since, err := e.gc.RecordingSince(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !since.After(lost) || f.Taken.Sub(since) < failoverWindow {
				t.Fatalf("fence taken at %v on epoch %v: the lost access at %v is within the window", f.Taken, since, lost)
			}
			_ = e.gc.Release(ctx, f)
			return at
		}
		if !errors.Is(err, reclaim.ErrNotRecording) && !errors.Is(err, reclaim.ErrTrackerUnavailable) {
			t.Fatalf("fence after the failover: %v", err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no fence allowed again: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitUntil polls f every 50 ms until it returns nil or ctx ends (waiting
// for an external process: a client finding the promoted replica).
func waitUntil(ctx context.Context, f func() error) error {
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %v", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// touching is a registry recording accesses of fresh blobs in a loop.
type touching struct {
	cancel          context.CancelFunc
	wg              sync.WaitGroup
	ok, unavailable int64
	other           error
}

// startTouching records accesses on tr in a loop and lets tr tick every
// second, as a registry does, until stop.
func startTouching(tr *Tracker) *touching {
	ctx, cancel := context.WithCancel(context.Background())
	w := &touching{cancel: cancel}
	w.wg.Go(func() { tr.KeepRecording(ctx, time.Second) })
	w.wg.Go(func() {
		for i := 0; ctx.Err() == nil; i++ {
			_, err := tr.TouchBlob(ctx, digest.FromString(fmt.Sprintf("load %d %p", i, w)), nil)
			switch {
			case err == nil:
				w.ok++
			case errors.Is(err, reclaim.ErrTrackerUnavailable):
				w.unavailable++ // the registry answers 503 + Retry-After
			case w.other == nil:
				w.other = err
			}
		}
	})
	return w
}

func (w *touching) stop(t *testing.T) (ok, unavailable int64) {
	t.Helper()
	w.cancel()
	w.wg.Wait()
	if w.other != nil {
		t.Fatalf("a touch failed other than retryably: %v", w.other)
	}
	if w.ok == 0 {
		t.Fatal("the registry recorded nothing during the round")
	}
	return w.ok, w.unavailable
}
