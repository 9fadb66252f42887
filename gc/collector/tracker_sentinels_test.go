package collector

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/opencontainers/go-digest"
	"github.com/redis/go-redis/v9"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/redisstate"
)

// TestTrackerAdapterSentinels drives a real redisstate.Tracker (miniredis)
// as the collector's Tracker, as the registry wires it, and checks that
// every outcome a run branches on arrives as reclaim's sentinel.
func TestTrackerAdapterSentinels(t *testing.T) {
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer c.Close()
	st, err := redisstate.NewTracker(c, redisstate.TrackerOptions{Prefix: "t:"})
	if err != nil {
		t.Fatal(err)
	}
	var tr Tracker = st
	ctx := context.Background()
	const w = time.Minute

	if _, err := tr.RecordingSince(ctx); !errors.Is(err, reclaim.ErrNotRecording) {
		t.Fatalf("no epoch: %v", err)
	}
	if err := st.StartRecording(ctx); err != nil {
		t.Fatal(err)
	}
	m.SetTime(time.Now().Add(time.Hour)) // the epoch is now an hour old
	o := reclaim.Object{Blob: digest.FromString("b"), Repo: "r", Kind: reclaim.LinkLayer}
	hold, err := tr.Fence(ctx, o, w, time.Minute)
	if err != nil {
		t.Fatalf("fence: %v", err)
	}
	if _, err := tr.Fence(ctx, o, w, time.Minute); !errors.Is(err, reclaim.ErrFenced) {
		t.Fatalf("second fence: %v", err)
	}
	if err := hold.Confirm(ctx); err != nil {
		t.Fatalf("confirm a held fence: %v", err)
	}
	if err := hold.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := hold.Confirm(ctx); !errors.Is(err, reclaim.ErrFenceLost) {
		t.Fatalf("confirm a released fence: %v", err)
	}
	// A fence whose lease ran out must not be confirmed: a writer may have
	// passed meanwhile.
	other := reclaim.Object{Blob: digest.FromString("c")}
	expiring, err := tr.Fence(ctx, other, w, time.Minute)
	if err != nil {
		t.Fatalf("fence: %v", err)
	}
	m.FastForward(2 * time.Minute)
	if err := expiring.Confirm(ctx); !errors.Is(err, reclaim.ErrFenceLost) {
		t.Fatalf("confirm an expired fence: %v", err)
	}
	if err := st.Touch(ctx, reclaim.Object{Blob: o.Blob, Repo: o.Repo, Kind: reclaim.LinkLayer}); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Fence(ctx, o, w, time.Minute); !errors.Is(err, reclaim.ErrRecentlyAccessed) {
		t.Fatalf("fence after access: %v", err)
	}
	if at, ok, err := tr.LastAccess(ctx, o); err != nil || !ok || at.IsZero() {
		t.Fatalf("last access: %v %v %v", at, ok, err)
	}
	_, unlock, err := tr.LockRepository(ctx, "r", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := tr.LockRepository(ctx, "r", time.Minute); !errors.Is(err, reclaim.ErrRepositoryBusy) {
		t.Fatalf("second lock: %v", err)
	}
	unlock()
	m.Close()
	if _, err := tr.RecordingSince(ctx); !errors.Is(err, reclaim.ErrTrackerUnavailable) {
		t.Fatalf("redis down: %v", err)
	}
}
