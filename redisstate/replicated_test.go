package redisstate

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/storagetest/redistest"
)

// A blob's fence counts only once a replica acknowledged it
// (replicated.go): with the replica of the blob's master stopped, the
// confirmation right before a blob delete fails (the delete does not
// happen) and the fence is still held; with the replica back, it passes.
// A link's fence is confirmed as before, replica or not.
func TestBlobFenceConfirmWaitsForAReplica(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	c := redistest.StartCluster(t)
	ctx := context.Background()
	tr, err := NewTracker(c.Client(t), TrackerOptions{Prefix: "reclaim:"})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.StartRecording(ctx); err != nil {
		t.Fatal(err)
	}
	age(t, tr, window)
	blob := digest.FromString("replicated fence")
	f, err := tr.fence(ctx, reclaim.Object{Blob: blob}, window, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	link, err := tr.fence(ctx, reclaim.Object{Blob: digest.FromString("link"), Repo: "r", Kind: reclaim.LinkLayer}, window, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Confirm(ctx, f, time.Minute); err != nil {
		t.Fatalf("confirm with the replica up: %v", err)
	}

	master, err := c.MasterFor(ctx, f.key)
	if err != nil {
		t.Fatal(err)
	}
	replica, err := c.ReplicaOf(ctx, master)
	if err != nil {
		t.Fatal(err)
	}
	c.Pause(replica)
	resumed := false
	defer func() {
		if !resumed {
			c.Resume(replica)
		}
	}()
	start := time.Now()
	err = tr.Confirm(ctx, f, time.Minute)
	took := time.Since(start)
	if err == nil || !errors.Is(err, reclaim.ErrTrackerUnavailable) || !strings.Contains(err.Error(), "not acknowledged") {
		t.Fatalf("confirm with the replica stopped: %v, want a failure: not acknowledged by a replica", err)
	}
	if took < replicaAck || took > replicaAck+5*time.Second {
		t.Errorf("confirm with the replica stopped took %v, want about %v", took, replicaAck)
	}
	t.Logf("blob fence confirm with its replica stopped: %v after %v", err, took.Round(time.Millisecond))
	if err := tr.Confirm(ctx, link, time.Minute); err != nil {
		t.Errorf("a link's fence waits for no replica: %v", err)
	}
	if held, err := tr.Fenced(ctx, reclaim.Object{Blob: blob}); err != nil || !held {
		t.Errorf("the blob's fence after an unacknowledged confirm: held=%v err=%v, want held", held, err)
	}

	c.Resume(replica)
	resumed = true
	deadline := time.Now().Add(10 * time.Second)
	for {
		err = tr.Confirm(ctx, f, time.Minute)
		if err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("confirm after the replica came back: %v", err)
	}
}
