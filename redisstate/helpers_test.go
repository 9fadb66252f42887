package redisstate

import (
	"context"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/redis/go-redis/v9"

	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

var dA = digest.Digest("sha256:a3ed95caeb02ffe68cdd9fd84406680ae93d633cb16422d00e8a7c22955b46d4")

func newTestTracker(t *testing.T, b storagetest.Backend) *Tracker {
	t.Helper()
	tr, err := NewTracker(b.Client(t), TrackerOptions{Prefix: b.Prefix})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// age moves every access record and the recording epoch under tr's prefix
// d into the past, as if d had passed without an access: the test clock
// for miniredis and a real Redis alike, whose scripts read their own TIME.
func age(t *testing.T, tr *Tracker, d time.Duration) {
	t.Helper()
	storagetest.Age(t, tr.c, tr.opts.Prefix, d)
}

// expire lets key's TTL run out: miniredis is fast-forwarded past it, a
// real Redis is polled until the key is gone.
func expire(t *testing.T, b storagetest.Backend, c redis.UniversalClient, key string, ttl time.Duration) {
	t.Helper()
	if b.Mini != nil {
		b.Mini.FastForward(ttl + time.Millisecond)
		return
	}
	ctx := context.Background()
	deadline := time.After(ttl + 10*time.Second)
	poll := time.NewTicker(ttl / 4)
	defer poll.Stop()
	for c.Exists(ctx, key).Val() != 0 {
		select {
		case <-deadline:
			t.Fatalf("%s outlived its TTL %v", key, ttl)
		case <-poll.C:
		}
	}
}
