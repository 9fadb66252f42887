package redisstate

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
	"github.com/redis/go-redis/v9"
)

var dB = digest.FromString("b")

// window is the tests' protection window; age moves time past it.
const window = time.Minute

func TestTouchAndFence(t *testing.T) {
	storagetest.ForEachBackend(t, func(t *testing.T, b storagetest.Backend) {
		tr := newTestTracker(t, b)
		checkEpochGate(t, tr)
		age(t, tr, window)
		checkRecentAccess(t, tr)
		age(t, tr, window)
		checkLinkFence(t, tr)
		age(t, tr, window)
		checkBlobFence(t, tr)
		checkLeaseExpiry(t, b, tr)
	})
}

var layerA = reclaim.Object{Blob: dA, Repo: "r", Kind: reclaim.LinkLayer}

// No fence without an epoch a window old.
func checkEpochGate(t *testing.T, tr *Tracker) {
	t.Helper()
	ctx := context.Background()
	if _, err := tr.Fence(ctx, reclaim.Object{Blob: dA}, window, time.Minute); !errors.Is(err, reclaim.ErrNotRecording) {
		t.Fatalf("fence without epoch: %v, want ErrNotRecording", err)
	}
	if err := tr.StartRecording(ctx); err != nil {
		t.Fatal(err)
	}
	// Epoch younger than the window: not trusted.
	if _, err := tr.Fence(ctx, reclaim.Object{Blob: dA}, window, time.Minute); !errors.Is(err, reclaim.ErrNotRecording) {
		t.Fatalf("fence with young epoch: %v, want ErrNotRecording", err)
	}
	if n, _ := tr.c.Exists(ctx, tr.fenceKey(reclaim.Object{Blob: dA})).Result(); n != 0 {
		t.Fatal("a refused fence was left behind")
	}
}

// Recently accessed: GC keeps it, blob and link alike.
func checkRecentAccess(t *testing.T, tr *Tracker) {
	t.Helper()
	ctx := context.Background()
	if err := tr.Touch(ctx, reclaim.Object{Blob: dA}, layerA); err != nil {
		t.Fatal(err)
	}
	if at, ok, err := tr.LastAccess(ctx, layerA); err != nil || !ok || time.Since(at) > time.Minute {
		t.Fatalf("LastAccess = %v %v %v", at, ok, err)
	}
	for _, o := range []reclaim.Object{{Blob: dA}, layerA} {
		if _, err := tr.Fence(ctx, o, window, time.Minute); !errors.Is(err, reclaim.ErrRecentlyAccessed) {
			t.Fatalf("fence %v right after access: %v", o, err)
		}
	}
}

// A fenced link refuses touches and records nothing; the blob alone, or
// another repository's link, is not fenced.
func checkLinkFence(t *testing.T, tr *Tracker) {
	t.Helper()
	ctx := context.Background()
	if fenced, err := tr.Fenced(ctx, layerA); err != nil || fenced {
		t.Fatalf("Fenced before the fence: %v %v", fenced, err)
	}
	f, err := tr.fence(ctx, layerA, window, time.Minute)
	if err != nil {
		t.Fatalf("fence after window: %v", err)
	}
	otherA := reclaim.Object{Blob: dA, Repo: "other", Kind: reclaim.LinkLayer}
	if fenced, err := tr.Fenced(ctx, layerA); err != nil || !fenced {
		t.Fatalf("Fenced under the fence: %v %v", fenced, err)
	}
	if fenced, _ := tr.Fenced(ctx, otherA); fenced {
		t.Fatal("a link fence fences another repository's link")
	}
	before, _, _ := tr.LastAccess(ctx, reclaim.Object{Blob: dA})
	if err := tr.Touch(ctx, reclaim.Object{Blob: dA}, layerA); !errors.Is(err, reclaim.ErrFenced) {
		t.Fatalf("touch fenced link: %v", err)
	}
	if after, _, _ := tr.LastAccess(ctx, reclaim.Object{Blob: dA}); !after.Equal(before) {
		t.Fatal("a refused touch recorded an access")
	}
	if err := tr.Touch(ctx, reclaim.Object{Blob: dA, Repo: "other", Kind: reclaim.LinkLayer}); err != nil {
		t.Fatalf("touch other link: %v", err)
	}
	if _, err := tr.Fence(ctx, layerA, window, time.Minute); !errors.Is(err, reclaim.ErrFenced) {
		t.Fatalf("second fence: %v", err)
	}
	if err := tr.Release(ctx, f); err != nil {
		t.Fatal(err)
	}
	if fenced, _ := tr.Fenced(ctx, layerA); fenced {
		t.Fatal("Fenced after the release")
	}
	if err := tr.Touch(ctx, layerA); err != nil {
		t.Fatalf("touch after release: %v", err)
	}
}

// A blob fence blocks every link of the blob, and only its holder releases
// it.
func checkBlobFence(t *testing.T, tr *Tracker) {
	t.Helper()
	ctx := context.Background()
	fb, err := tr.fence(ctx, reclaim.Object{Blob: dA}, window, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Touch(ctx, reclaim.Object{Blob: dA, Repo: "third", Kind: reclaim.LinkManifest}); !errors.Is(err, reclaim.ErrFenced) {
		t.Fatalf("touch link of fenced blob: %v", err)
	}
	if fenced, err := tr.Fenced(ctx, reclaim.Object{Blob: dA, Repo: "third", Kind: reclaim.LinkManifest}); err != nil || !fenced {
		t.Fatalf("Fenced: a link of a fenced blob: %v %v", fenced, err)
	}
	if _, err := tr.Fence(ctx, layerA, window, time.Minute); !errors.Is(err, reclaim.ErrFenced) {
		t.Fatalf("fence link of fenced blob: %v", err)
	}
	if err := tr.Release(ctx, &Fence{Object: fb.Object, Token: "x", key: fb.key}); err != nil {
		t.Fatal(err)
	}
	if n, _ := tr.c.Exists(ctx, fb.key).Result(); n != 1 {
		t.Fatal("foreign release removed the fence")
	}
	_ = tr.Release(ctx, fb)
}

// Lease expiry frees the object even if GC dies.
func checkLeaseExpiry(t *testing.T, b storagetest.Backend, tr *Tracker) {
	t.Helper()
	ctx := context.Background()
	const lease = 50 * time.Millisecond
	f, err := tr.fence(ctx, reclaim.Object{Blob: dB}, window, lease)
	if err != nil {
		t.Fatal(err)
	}
	expire(t, b, tr.c, f.key, lease)
	if err := tr.Touch(ctx, reclaim.Object{Blob: dB}); err != nil {
		t.Fatalf("touch after lease expiry: %v", err)
	}
}

func TestTombstones(t *testing.T) {
	storagetest.ForEachBackend(t, func(t *testing.T, b storagetest.Backend) {
		ctx := context.Background()
		tr := newTestTracker(t, b)
		l := reclaim.Object{Blob: dA, Repo: "r", Kind: reclaim.LinkLayer}
		if err := tr.MarkGone(ctx, l); err != nil {
			t.Fatal(err)
		}
		gone, err := tr.TouchBlob(ctx, dA, []reclaim.Object{l})
		if err != nil || len(gone) != 1 || gone[0].Object != l || gone[0].Value == "" {
			t.Fatalf("touch = %v %v, want l's tombstone", gone, err)
		}
		if gone, _ := tr.TouchBlob(ctx, dA, []reclaim.Object{{Blob: dA, Repo: "s", Kind: reclaim.LinkLayer}}); gone != nil {
			t.Fatal("tombstone of r seen by s")
		}
		again, _ := tr.TouchBlob(ctx, dA, []reclaim.Object{l})
		if len(again) != 1 {
			t.Fatal("a touch cleared the tombstone")
		}
		if err := tr.ClearGone(ctx, again); err != nil {
			t.Fatal(err)
		}
		if gone, _ := tr.TouchBlob(ctx, dA, []reclaim.Object{l}); gone != nil {
			t.Fatal("ClearGone left the tombstone")
		}
	})
}

// ClearGone deletes a tombstone only while it holds the value the touch
// saw: a delete that wrote one since (between the touch and the clear)
// keeps its own. The blob's and the links' tombstones are told apart.
func TestClearGoneKeepsFresherTombstone(t *testing.T) {
	storagetest.ForEachBackend(t, func(t *testing.T, b storagetest.Backend) {
		ctx := context.Background()
		tr := newTestTracker(t, b)
		blob := reclaim.Object{Blob: dA}
		layer := reclaim.Object{Blob: dA, Repo: "r", Kind: reclaim.LinkLayer}
		rev := reclaim.Object{Blob: dA, Repo: "r", Kind: reclaim.LinkManifest} // the same tombstone as layer's
		for _, o := range []reclaim.Object{blob, layer} {
			if err := tr.MarkGone(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
		seen, err := tr.TouchBlob(ctx, dA, []reclaim.Object{layer, rev})
		if err != nil || len(seen) != 3 {
			t.Fatalf("touch = %v %v, want the blob's tombstone and r's (twice)", seen, err)
		}
		if err := tr.MarkGone(ctx, layer); err != nil { // a delete, after the touch
			t.Fatal(err)
		}
		if err := tr.ClearGone(ctx, seen); err != nil {
			t.Fatal(err)
		}
		gone, err := tr.TouchBlob(ctx, dA, []reclaim.Object{layer})
		if err != nil || len(gone) != 1 || gone[0].Object != layer {
			t.Fatalf("after the clear: %v %v, want only r's fresh tombstone", gone, err)
		}
		for _, g := range seen {
			if g.Object.Repo != "" && g.Value == gone[0].Value {
				t.Fatal("MarkGone wrote the value it had written before")
			}
		}
	})
}

func TestLockRepository(t *testing.T) {
	storagetest.ForEachBackend(t, func(t *testing.T, b storagetest.Backend) {
		ctx := context.Background()
		tr := newTestTracker(t, b)
		renewals := watchRenewals(tr, "a/b")
		held, unlock, err := tr.LockRepository(ctx, "a/b", 600*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		// four renewals, lease/3 apart: renewed past its first lease
		for range 4 {
			select {
			case <-renewals:
			case <-time.After(10 * time.Second):
				t.Fatal("the lock is not renewed")
			}
		}
		if _, _, err := tr.LockRepository(ctx, "a/b", time.Second); !errors.Is(err, reclaim.ErrRepositoryBusy) {
			t.Fatalf("second lock: %v", err)
		}
		if err := held.Err(); err != nil {
			t.Fatalf("a renewed lock reported lost: %v", context.Cause(held))
		}
		unlock()
		unlock() // idempotent
		_, u2, err := tr.LockRepository(ctx, "a/b", time.Second)
		if err != nil {
			t.Fatalf("lock after unlock: %v", err)
		}
		u2()
		if _, _, err := tr.LockRepository(ctx, "Bad Name", time.Second); err == nil {
			t.Fatal("bad name accepted")
		}
	})
}

// A lock taken away (or expired) under its holder ends the holder's
// context at its next renewal.
func TestLockRepositoryLost(t *testing.T) {
	storagetest.ForEachBackend(t, func(t *testing.T, b storagetest.Backend) {
		ctx := context.Background()
		tr := newTestTracker(t, b)
		held, unlock, err := tr.LockRepository(ctx, "a/lost", 30*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		defer unlock()
		if err := tr.Client().Del(ctx, tr.opts.Prefix+"run:a/lost").Err(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-held.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the lock was deleted and its holder's context goes on")
		}
		if cause := context.Cause(held); !errors.Is(cause, reclaim.ErrLockLost) {
			t.Fatalf("cause %v, want ErrLockLost", cause)
		}
	})
}

// TestRedisGapMovesEpoch: a registry-side failure followed by a success
// moves the epoch forward, so GC distrusts the gap.
func TestRedisGapMovesEpoch(t *testing.T) {
	for _, b := range storagetest.Backends(t)[:1] { // needs miniredis' fault injection
		ctx := context.Background()
		tr := newTestTracker(t, b)
		if err := tr.StartRecording(ctx); err != nil {
			t.Fatal(err)
		}
		e0, _ := tr.RecordingSince(ctx)
		b.Mini.SetError("LOADING injected")
		if err := tr.Touch(ctx, reclaim.Object{Blob: dA}); !errors.Is(err, reclaim.ErrTrackerUnavailable) {
			t.Fatalf("touch with redis failing: %v", err)
		}
		b.Mini.SetError("")
		b.Mini.SetTime(e0.Add(time.Second)) // a move of the epoch shows
		if err := tr.Touch(ctx, reclaim.Object{Blob: dA}); err != nil {
			t.Fatal(err)
		}
		e1, err := tr.RecordingSince(ctx)
		if err != nil || !e1.After(e0) {
			t.Fatalf("epoch after gap = %v (%v), before %v: want later", e1, err, e0)
		}
		// Lost data: the epoch disappears, and StartRecording sets a new one.
		b.Mini.FlushAll()
		if _, err := tr.RecordingSince(ctx); !errors.Is(err, reclaim.ErrNotRecording) {
			t.Fatalf("after flush: %v", err)
		}
		if err := tr.StartRecording(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := tr.RecordingSince(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// A client hanging up mid-request is not a Redis failure: the epoch stays.
func TestCanceledClientIsNoGap(t *testing.T) {
	b := storagetest.Backends(t)[0]
	ctx := context.Background()
	tr := newTestTracker(t, b)
	if err := tr.StartRecording(ctx); err != nil {
		t.Fatal(err)
	}
	e0, _ := tr.RecordingSince(ctx)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := tr.Touch(cctx, reclaim.Object{Blob: dA}); err != nil {
		t.Fatalf("touch with a canceled request context: %v", err)
	}
	b.Mini.SetTime(e0.Add(time.Second)) // a move of the epoch would show
	if err := tr.Touch(ctx, reclaim.Object{Blob: dA}); err != nil {
		t.Fatal(err)
	}
	if e1, _ := tr.RecordingSince(ctx); !e1.Equal(e0) {
		t.Fatalf("epoch moved from %v to %v", e0, e1)
	}
}

// watchRenewals reports every successful renewal of repo's lock on tr.
func watchRenewals(tr *Tracker, repo string) <-chan struct{} {
	ch := make(chan struct{}, 100)
	tr.c.AddHook(renewalHook{key: tr.opts.Prefix + "run:" + repo, ch: ch})
	return ch
}

// renewalHook is a go-redis hook that sends on ch for every renewal of the
// lock under key that kept it: the renew script (key, token, lease) with
// reply 1.
type renewalHook struct {
	key string
	ch  chan struct{}
}

func (h renewalHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h renewalHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h renewalHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		a := cmd.Args()
		if name := cmd.Name(); (name == "evalsha" || name == "eval") && len(a) == 6 && a[3] == h.key {
			if c, ok := cmd.(*redis.Cmd); ok && err == nil && c.Val() == int64(1) {
				select {
				case h.ch <- struct{}{}:
				default:
				}
			}
		}
		return err
	}
}
