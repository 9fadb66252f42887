package storagetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// RedisAddrEnv names the environment variable that points tests at a real
// redis-server (host:port). Every package reads it through RealRedis or
// Backends, never directly.
const RedisAddrEnv = "RECLAIM_TEST_REDIS_ADDR"

// Backend is one Redis to run a test against, with a key prefix of its own
// so parallel tests (and packages) never collide on a real server.
type Backend struct {
	Name   string
	Addr   string
	Prefix string
	Mini   *miniredis.Miniredis // nil for real Redis
}

// RealRedis returns the address of the real redis-server tests may use, or
// "" when none is configured.
func RealRedis() string { return os.Getenv(RedisAddrEnv) }

// Backends returns miniredis, plus the real Redis named by RedisAddrEnv when
// it is set. Keys a test leaves on the real server are deleted at cleanup.
func Backends(t testing.TB) []Backend {
	t.Helper()
	m := miniredis.RunT(t)
	out := []Backend{{Name: "miniredis", Addr: m.Addr(), Prefix: "reclaim:", Mini: m}}
	if addr := RealRedis(); addr != "" {
		out = append(out, Backend{Name: "redis", Addr: addr, Prefix: RealPrefix(t, addr)})
	}
	return out
}

// RealPrefix returns a fresh key prefix on the real Redis at addr and
// deletes every key under it when the test ends.
func RealPrefix(t testing.TB, addr string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "reclaimtest:" + hex.EncodeToString(b[:]) + ":"
	t.Cleanup(func() {
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		ctx := context.Background()
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
	})
	return prefix
}

// ForEachBackend runs f once per backend as a subtest.
func ForEachBackend(t *testing.T, f func(t *testing.T, b Backend)) {
	for _, b := range Backends(t) {
		t.Run(b.Name, func(t *testing.T) { f(t, b) })
	}
}

// Client returns a client of the backend, closed when the test ends.
func (b Backend) Client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: b.Addr})
	t.Cleanup(func() { c.Close() })
	return c
}
