package registry

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/opencontainers/go-digest"
	"github.com/redis/go-redis/v9"

	"github.com/reclaim-registry/reclaim/gc"
	"github.com/reclaim-registry/reclaim/storage"
)

// TestTrackerAdapterSentinels drives the adapter over a real
// storage.Tracker (miniredis) and checks that every outcome gc branches on
// arrives as gc's sentinel.
func TestTrackerAdapterSentinels(t *testing.T) {
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer c.Close()
	st, err := storage.NewTracker(c, storage.TrackerOptions{Prefix: "t:"})
	if err != nil {
		t.Fatal(err)
	}
	tr := gcTracker{st}
	ctx := context.Background()
	const w = time.Minute

	if _, err := tr.RecordingSince(ctx); !errors.Is(err, gc.ErrNotRecording) {
		t.Fatalf("no epoch: %v", err)
	}
	if err := st.StartRecording(ctx); err != nil {
		t.Fatal(err)
	}
	m.SetTime(time.Now().Add(time.Hour)) // the epoch is now an hour old
	o := gc.Object{Blob: digest.FromString("b"), Repo: "r", Kind: gc.LinkLayer}
	release, err := tr.Fence(ctx, o, w, time.Minute)
	if err != nil {
		t.Fatalf("fence: %v", err)
	}
	if _, err := tr.Fence(ctx, o, w, time.Minute); !errors.Is(err, gc.ErrFenced) {
		t.Fatalf("second fence: %v", err)
	}
	if err := release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := st.Touch(ctx, storage.Object{Blob: o.Blob, Repo: o.Repo, Kind: storage.LinkLayer}); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Fence(ctx, o, w, time.Minute); !errors.Is(err, gc.ErrRecentlyAccessed) {
		t.Fatalf("fence after access: %v", err)
	}
	if at, ok, err := tr.LastAccess(ctx, o); err != nil || !ok || at.IsZero() {
		t.Fatalf("last access: %v %v %v", at, ok, err)
	}
	unlock, err := tr.LockRepository(ctx, "r", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.LockRepository(ctx, "r", time.Minute); !errors.Is(err, gc.ErrRepositoryBusy) {
		t.Fatalf("second lock: %v", err)
	}
	unlock()
	m.Close()
	if _, err := tr.RecordingSince(ctx); !errors.Is(err, gc.ErrTrackerUnavailable) {
		t.Fatalf("redis down: %v", err)
	}
}
