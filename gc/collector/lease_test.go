package collector

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/gc/internal/gctest"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/redis/go-redis/v9"
)

// The fence lease against slow deletes (fixture in lease_fixture_test.go).

// A delete held in the storage for longer than the fence lease keeps its
// fence: a writer is still refused after the lease ran out twice over,
// because the collector renews the fence while the delete runs.
func TestSlowDeleteKeepsItsFence(t *testing.T) {
	for _, tc := range []deleteTarget{layerTarget, blobTarget} {
		t.Run(tc.name, func(t *testing.T) {
			f := newLeaseFixture(t)
			const repo = "slow"
			d := f.layer(repo, "stray "+tc.name)
			reached, release := f.hold(tc.dir(repo, d))
			done := f.start(repo)
			gctest.Wait(t, reached, "the delete")

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
			if !errors.Is(err, reclaim.ErrFenced) {
				close(release)
				gctest.Wait(t, done, "the run")
				t.Fatalf("a writer touched %s while its delete ran, 2.4 leases after it was confirmed: %v (%d renewals)", tc.name, err, renewed)
			}
			close(release)
			res := gctest.Wait(t, done, "the run")
			if res.err != nil {
				t.Fatal(res.err)
			}
			if got := reasonOf(res.rep, tc.kind, d); got != reclaim.ReasonUnreferenced {
				t.Fatalf("%s: %v, want unreferenced\n%s %v", tc.name, got, summary(res.rep), res.rep.Decisions())
			}
			if f.exists(tc.dir(repo, d)) {
				t.Fatalf("%s not deleted", tc.name)
			}
		})
	}
}

// fenceLoss is one way a fence is lost while its delete waits in the
// storage.
type fenceLoss struct {
	name   string
	target deleteTarget
	// onCancel is what the storage does when the delete is called off (see
	// holdDelete).
	onCancel func(f *leaseFixture) func(ctx context.Context, p string) error
	// lose makes the fence lost; renewing tells whether a renewer waits on
	// the collector's clock, and lose returns whether it still renews.
	lose func(f *leaseFixture, repo string, d digest.Digest, renewing bool) bool
	want reclaim.Reason
	// anyDeleteAfter: the storage may see a delete after the loss (the
	// driver finishes what it was asked).
	anyDeleteAfter bool
	// kept and gone are the paths that must and must not exist after;
	// redisKept the Redis keys that must.
	kept, gone func(repo string, d digest.Digest) []string
	redisKept  func(d digest.Digest) []string
	// detail is a part the kept object's detail must contain.
	detail string
}

// dropFence deletes the fence's key in Redis (failover, eviction, a hand),
// and lets the renewer find out.
func dropFence(f *leaseFixture, key string) {
	f.mr.Del(key)
	f.clk.Advance(testLease / 3)
}

func linkAndBlob(repo string, d digest.Digest) []string {
	return []string{layout.LayerLinkPath(repo, d), layout.ReverseLinkPath(d, repo, reclaim.LinkLayer), layout.BlobDataPath(d)}
}

var fenceLosses = []fenceLoss{{
	// The blob: the delete that would break an image a writer links.
	name: "lease ran out while the renewal stalled", target: blobTarget, want: reclaim.ReasonFenceLost,
	lose: func(f *leaseFixture, _ string, d digest.Digest, renewing bool) bool {
		stalled, unstall := make(chan struct{}), make(chan struct{})
		var once sync.Once
		f.tr.setOnConfirm(func(reclaim.Object) { once.Do(func() { close(stalled); <-unstall }) })
		if renewing {
			f.clk.Advance(testLease / 3)
			gctest.Wait(f.t, stalled, "a renewal")
		}
		f.mr.FastForward(testLease + time.Second) // the renewal is too late
		// A writer passes the expired fence and links the blob into
		// another repository (reverse link, then forward link).
		if err := f.env.Driver.PutContent(context.Background(), layout.LayerLinkPath("writer", d), []byte(d)); err != nil {
			f.t.Errorf("writer: %v", err)
		}
		close(unstall)
		return renewing
	},
	kept: func(_ string, d digest.Digest) []string {
		return []string{layout.BlobDataPath(d), layout.LayerLinkPath("writer", d), layout.ReverseLinkPath(d, "writer", reclaim.LinkLayer)}
	},
}, {
	// The layer link: Redis lost the key.
	name: "fence key deleted", target: layerTarget, want: reclaim.ReasonFenceLost,
	lose: func(f *leaseFixture, repo string, d digest.Digest, renewing bool) bool {
		dropFence(f, layerTarget.fenceKey(repo, d))
		return renewing
	},
	kept: linkAndBlob,
}, {
	// A driver that finishes the forward delete anyway (the filesystem
	// driver ignores contexts): the reverse link stays, a leak.
	name: "driver ignores the cancel", target: layerTarget, want: reclaim.ReasonFenceLost, anyDeleteAfter: true,
	onCancel: func(*leaseFixture) func(context.Context, string) error {
		return func(context.Context, string) error { return nil }
	},
	lose: func(f *leaseFixture, repo string, d digest.Digest, renewing bool) bool {
		dropFence(f, layerTarget.fenceKey(repo, d))
		return renewing
	},
	kept: func(repo string, d digest.Digest) []string { return linkAndBlob(repo, d)[1:] },
	gone: func(repo string, d digest.Digest) []string { return linkAndBlob(repo, d)[:1] },
}, {
	// An object store executed the delete, but the client gave up (the
	// cancel reached it first): the data is gone and the call failed. The
	// blob's tombstone must be there all the same, or a stale descriptor
	// cache would vouch for the missing data to the next push.
	name: "blob delete ran but its call failed", target: blobTarget, want: reclaim.ReasonFenceLost, anyDeleteAfter: true,
	onCancel: func(f *leaseFixture) func(context.Context, string) error {
		return func(ctx context.Context, p string) error {
			if err := f.mem.Delete(context.Background(), p); err != nil {
				return err
			}
			return ctx.Err()
		}
	},
	lose: func(f *leaseFixture, repo string, d digest.Digest, renewing bool) bool {
		dropFence(f, blobTarget.fenceKey(repo, d))
		return renewing
	},
	gone:      func(_ string, d digest.Digest) []string { return []string{layout.BlobDataPath(d)} },
	redisKept: func(d digest.Digest) []string { return []string{"reclaim:{" + d.String() + "}:gone"} }, // the tombstone
}, {
	// The worst case of a delete already sent (docs/gc-protocol.md, "What
	// cancellation cannot do"): a writer passes the lost fence, its Stat
	// still finds the data, it links the blob; then the delete lands. The
	// data cannot be brought back: the report must say it is gone.
	name: "blob delete landed after a writer linked it", target: blobTarget, want: reclaim.ReasonFenceLost, anyDeleteAfter: true,
	onCancel: func(f *leaseFixture) func(context.Context, string) error {
		return func(_ context.Context, p string) error { return f.mem.Delete(context.Background(), p) }
	},
	lose: func(f *leaseFixture, _ string, d digest.Digest, renewing bool) bool {
		f.mr.Del(blobTarget.fenceKey("", d))
		if err := f.env.Driver.PutContent(context.Background(), layout.LayerLinkPath("writer", d), []byte(d)); err != nil {
			f.t.Errorf("writer: %v", err)
		}
		f.clk.Advance(testLease / 3)
		return renewing
	},
	kept:   func(_ string, d digest.Digest) []string { return []string{layout.LayerLinkPath("writer", d)} },
	gone:   func(_ string, d digest.Digest) []string { return []string{layout.BlobDataPath(d)} },
	detail: "the data is gone all the same",
}, {
	name: "redis unreachable until the deadline", target: blobTarget, want: reclaim.ReasonDeleteTimeout,
	lose: func(f *leaseFixture, _ string, _ digest.Digest, renewing bool) bool {
		f.mr.SetError("LOADING redis is loading the dataset in memory")
		f.clk.Advance(testLease / 3) // the renewal fails
		renewing = renewing && f.clk.awaitWaiters(1)
		f.clk.Advance(testLease/2 - testLease/3) // half a lease since the last confirmation
		return renewing
	},
	kept: func(_ string, d digest.Digest) []string { return []string{layout.BlobDataPath(d)} },
}}

// A delete whose fence is lost while it runs is called off at once: the
// object is kept with a typed reason, and nothing is deleted after the
// loss, so a writer that passed the fence meanwhile keeps what it wrote.
func TestDeleteThatLosesItsFenceIsCancelled(t *testing.T) {
	for _, tc := range fenceLosses {
		t.Run(tc.name, func(t *testing.T) {
			f := newLeaseFixture(t)
			const repo = "lost"
			d := f.layer(repo, "stray "+tc.name)
			var onCancel func(context.Context, string) error
			if tc.onCancel != nil {
				onCancel = tc.onCancel(f)
			}
			dir := tc.target.dir(repo, d)
			reached, release := f.holdDelete(func(p string) bool { return p == dir }, onCancel)
			done := f.start(repo)
			gctest.Wait(t, reached, "the "+tc.target.name+" delete")
			n := f.deletesSoFar()
			if !tc.lose(f, repo, d, f.clk.awaitWaiters(1)) {
				t.Error("the delete runs and nothing renews its fence")
				close(release) // the storage answers at last
			}
			res := gctest.Wait(t, done, "the run")
			f.mr.SetError("")
			if res.err != nil {
				t.Fatal(res.err)
			}
			if got := reasonOf(res.rep, tc.target.kind, d); got != tc.want {
				t.Fatalf("%s: %v, want %v\n%v", tc.target.name, got, tc.want, res.rep.Decisions())
			}
			if tc.detail != "" && !strings.Contains(fmt.Sprint(res.rep.Decisions()), tc.detail) {
				t.Errorf("the report does not say %q:\n%v", tc.detail, res.rep.Decisions())
			}
			if after := f.deletesSince(n); len(after) > 0 && !tc.anyDeleteAfter {
				t.Fatalf("deleted after the fence was lost: %v", after)
			}
			f.checkPaths(repo, d, tc.kept, true)
			f.checkPaths(repo, d, tc.gone, false)
			if tc.redisKept != nil {
				for _, k := range tc.redisKept(d) {
					if !f.mr.Exists(k) {
						t.Errorf("redis key %s is gone", k)
					}
				}
			}
		})
	}
}

// checkPaths checks that every path paths lists exists (or not).
func (f *leaseFixture) checkPaths(repo string, d digest.Digest, paths func(string, digest.Digest) []string, exist bool) {
	f.t.Helper()
	if paths == nil {
		return
	}
	for _, p := range paths(repo, d) {
		if f.exists(p) != exist {
			f.t.Errorf("%s: exists %v, want %v", p, !exist, exist)
		}
	}
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
	cancelled := make(chan struct{})
	first, release := f.holdDelete(func(p string) bool { return strings.Contains(p, "/_layers/") },
		func(ctx context.Context, _ string) error {
			close(cancelled)
			return ctx.Err()
		})
	rc := &renewalCounter{key: "reclaim:run:" + repo, c: make(chan struct{}, 16)}
	f.env.Tracker.Client().AddHook(rc)
	done := f.start(repo)
	gctest.Wait(t, first, "the first link delete")
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
	res := gctest.Wait(t, done, "the run")
	if res.rep != nil {
		t.Logf("decisions: %v; errors: %v", res.rep.Decisions(), res.rep.Errors)
	}
	if !errors.Is(res.err, reclaim.ErrLockLost) {
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
		if r := reasonOf(res.rep, reclaim.KindLayerLink, d); r.Deletes() {
			t.Fatalf("%s reported %v", d, r)
		}
	}
}
