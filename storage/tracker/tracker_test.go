package tracker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

var dB = digest.FromString("b")

func TestTouchAndFence(t *testing.T) {
	storagetest.ForEachBackend(t, func(t *testing.T, b storagetest.Backend) {
		ctx := context.Background()
		tr := newTestTracker(t, b)
		if _, err := tr.Fence(ctx, layout.Object{Blob: dA}, time.Minute, time.Minute); !errors.Is(err, layout.ErrNotRecording) {
			t.Fatalf("fence without epoch: %v, want ErrNotRecording", err)
		}
		if err := tr.StartRecording(ctx); err != nil {
			t.Fatal(err)
		}
		// Epoch younger than the window: not trusted.
		if _, err := tr.Fence(ctx, layout.Object{Blob: dA}, time.Minute, time.Minute); !errors.Is(err, layout.ErrNotRecording) {
			t.Fatalf("fence with young epoch: %v, want ErrNotRecording", err)
		}
		if fenced, _ := tr.Fenced(ctx, layout.Object{Blob: dA}); fenced {
			t.Fatal("a refused fence was left behind")
		}
		const w = 400 * time.Millisecond // > any scheduling delay on a loaded CI box
		time.Sleep(w)

		layer := layout.Object{Blob: dA, Repo: "r", Kind: layout.LinkLayer}
		if err := tr.Touch(ctx, layout.Object{Blob: dA}, layer); err != nil {
			t.Fatal(err)
		}
		if at, ok, err := tr.LastAccess(ctx, layer); err != nil || !ok || time.Since(at) > time.Minute {
			t.Fatalf("LastAccess = %v %v %v", at, ok, err)
		}
		// Recently accessed: GC keeps it, blob and link alike.
		for _, o := range []layout.Object{{Blob: dA}, layer} {
			if _, err := tr.Fence(ctx, o, w, time.Minute); !errors.Is(err, layout.ErrRecentlyAccessed) {
				t.Fatalf("fence %v right after access: %v", o, err)
			}
		}
		time.Sleep(w + 20*time.Millisecond)
		f, err := tr.Fence(ctx, layer, w, time.Minute)
		if err != nil {
			t.Fatalf("fence after window: %v", err)
		}
		// The link is fenced: touching it is refused and records nothing;
		// the blob alone, or another repository's link, is not fenced.
		before, _, _ := tr.LastAccess(ctx, layout.Object{Blob: dA})
		if err := tr.Touch(ctx, layout.Object{Blob: dA}, layer); !errors.Is(err, layout.ErrFenced) {
			t.Fatalf("touch fenced link: %v", err)
		}
		if after, _, _ := tr.LastAccess(ctx, layout.Object{Blob: dA}); !after.Equal(before) {
			t.Fatal("a refused touch recorded an access")
		}
		if err := tr.Touch(ctx, layout.Object{Blob: dA, Repo: "other", Kind: layout.LinkLayer}); err != nil {
			t.Fatalf("touch other link: %v", err)
		}
		if _, err := tr.Fence(ctx, layer, w, time.Minute); !errors.Is(err, layout.ErrFenced) {
			t.Fatalf("second fence: %v", err)
		}
		if err := tr.Release(ctx, f); err != nil {
			t.Fatal(err)
		}
		if err := tr.Touch(ctx, layer); err != nil {
			t.Fatalf("touch after release: %v", err)
		}

		// A blob fence blocks every link of the blob.
		time.Sleep(w + 20*time.Millisecond)
		fb, err := tr.Fence(ctx, layout.Object{Blob: dA}, w, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.Touch(ctx, layout.Object{Blob: dA, Repo: "third", Kind: layout.LinkManifest}); !errors.Is(err, layout.ErrFenced) {
			t.Fatalf("touch link of fenced blob: %v", err)
		}
		if _, err := tr.Fence(ctx, layer, w, time.Minute); !errors.Is(err, layout.ErrFenced) {
			t.Fatalf("fence link of fenced blob: %v", err)
		}
		// A release with the wrong token does nothing.
		if err := tr.Release(ctx, &Fence{Object: fb.Object, Token: "x", key: fb.key}); err != nil {
			t.Fatal(err)
		}
		if fenced, _ := tr.Fenced(ctx, layout.Object{Blob: dA}); !fenced {
			t.Fatal("foreign release removed the fence")
		}
		_ = tr.Release(ctx, fb)

		// Lease expiry frees the object even if GC dies.
		time.Sleep(w + 20*time.Millisecond)
		if _, err := tr.Fence(ctx, layout.Object{Blob: dB}, w, 50*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if b.Mini != nil {
			b.Mini.FastForward(60 * time.Millisecond)
		} else {
			time.Sleep(60 * time.Millisecond)
		}
		if err := tr.Touch(ctx, layout.Object{Blob: dB}); err != nil {
			t.Fatalf("touch after lease expiry: %v", err)
		}
	})
}

func TestTombstones(t *testing.T) {
	storagetest.ForEachBackend(t, func(t *testing.T, b storagetest.Backend) {
		ctx := context.Background()
		tr := newTestTracker(t, b)
		l := layout.Object{Blob: dA, Repo: "r", Kind: layout.LinkLayer}
		if err := tr.MarkGone(ctx, l); err != nil {
			t.Fatal(err)
		}
		gone, err := tr.TouchBlob(ctx, dA, []layout.Object{l})
		if err != nil || !gone {
			t.Fatalf("touch = %v %v, want gone", gone, err)
		}
		if gone, _ := tr.TouchBlob(ctx, dA, []layout.Object{{Blob: dA, Repo: "s", Kind: layout.LinkLayer}}); gone {
			t.Fatal("tombstone of r seen by s")
		}
		if gone, _ := tr.TouchBlob(ctx, dA, []layout.Object{l}); !gone {
			t.Fatal("a touch cleared the tombstone")
		}
		if err := tr.ClearGone(ctx, l); err != nil {
			t.Fatal(err)
		}
		if gone, _ := tr.TouchBlob(ctx, dA, []layout.Object{l}); gone {
			t.Fatal("ClearGone left the tombstone")
		}
	})
}

func TestLockRepository(t *testing.T) {
	storagetest.ForEachBackend(t, func(t *testing.T, b storagetest.Backend) {
		ctx := context.Background()
		tr := newTestTracker(t, b)
		held, unlock, err := tr.LockRepository(ctx, "a/b", 600*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(900 * time.Millisecond) // renewed past its first lease
		if _, _, err := tr.LockRepository(ctx, "a/b", time.Second); !errors.Is(err, layout.ErrRepositoryBusy) {
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
		if cause := context.Cause(held); !errors.Is(cause, layout.ErrLockLost) {
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
		if err := tr.Touch(ctx, layout.Object{Blob: dA}); !errors.Is(err, layout.ErrTrackerUnavailable) {
			t.Fatalf("touch with redis failing: %v", err)
		}
		b.Mini.SetError("")
		time.Sleep(5 * time.Millisecond)
		if err := tr.Touch(ctx, layout.Object{Blob: dA}); err != nil {
			t.Fatal(err)
		}
		e1, err := tr.RecordingSince(ctx)
		if err != nil || !e1.After(e0) {
			t.Fatalf("epoch after gap = %v (%v), before %v: want later", e1, err, e0)
		}
		// Lost data: the epoch disappears, and StartRecording sets a new one.
		b.Mini.FlushAll()
		if _, err := tr.RecordingSince(ctx); !errors.Is(err, layout.ErrNotRecording) {
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
	if err := tr.Touch(cctx, layout.Object{Blob: dA}); err != nil {
		t.Fatalf("touch with a canceled request context: %v", err)
	}
	time.Sleep(5 * time.Millisecond)
	if err := tr.Touch(ctx, layout.Object{Blob: dA}); err != nil {
		t.Fatal(err)
	}
	if e1, _ := tr.RecordingSince(ctx); !e1.Equal(e0) {
		t.Fatalf("epoch moved from %v to %v", e0, e1)
	}
}
