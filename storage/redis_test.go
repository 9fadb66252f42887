package storage

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// backend is one Redis to run a test against, with a key prefix of its own
// so parallel tests (and packages) never collide on a real server.
type backend struct {
	name   string
	addr   string
	prefix string
	mini   *miniredis.Miniredis // nil for real Redis
}

// backends returns miniredis, plus the real Redis at
// RECLAIM_TEST_REDIS_ADDR when it is set.
func backends(t *testing.T) []backend {
	t.Helper()
	m := miniredis.RunT(t)
	out := []backend{{name: "miniredis", addr: m.Addr(), prefix: "reclaim:", mini: m}}
	if addr := os.Getenv("RECLAIM_TEST_REDIS_ADDR"); addr != "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		prefix := "reclaimtest:" + hex.EncodeToString(b[:]) + ":"
		out = append(out, backend{name: "redis", addr: addr, prefix: prefix})
		t.Cleanup(func() {
			c := redis.NewClient(&redis.Options{Addr: addr})
			defer c.Close()
			ctx := context.Background()
			iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
			for iter.Next(ctx) {
				c.Del(ctx, iter.Val())
			}
		})
	}
	return out
}

// forEachBackend runs f once per backend as a subtest.
func forEachBackend(t *testing.T, f func(t *testing.T, b backend)) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) { f(t, b) })
	}
}

func newTestTracker(t *testing.T, b backend) *Tracker {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: b.addr})
	t.Cleanup(func() { c.Close() })
	tr, err := NewTracker(c, TrackerOptions{Prefix: b.prefix})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}
