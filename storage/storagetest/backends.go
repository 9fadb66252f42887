package storagetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/reclaim-registry/reclaim/storage/storagetest/redistest"
)

// RedisAddrEnv names the environment variable that points tests at a real
// redis-server (host:port). Every package reads it through RealRedis or
// Backends, never directly.
const RedisAddrEnv = "RECLAIM_TEST_REDIS_ADDR"

// ClusterEnv names the environment variable that turns the cluster
// backend off ("0") in packages whose TestMain is storagetest.Main, or
// runs every combination of the slowest test matrices on it too ("all";
// by default they run one combination there, see ClusterAll).
const ClusterEnv = "RECLAIM_TEST_CLUSTER"

// ClusterAll reports RECLAIM_TEST_CLUSTER=all: tests whose matrices do not
// vary the Redis calls run every combination on the cluster backend too.
func ClusterAll() bool { return os.Getenv(ClusterEnv) == "all" }

// Backend is one Redis to run a test against, with a key prefix of its own
// so parallel tests (and packages) never collide on a real server.
type Backend struct {
	Name string
	// Addr is host:port; for a cluster, the nodes' addresses joined by
	// commas (Addrs splits them).
	Addr    string
	Prefix  string
	Mini    *miniredis.Miniredis // nil for real Redis
	Cluster bool                 // a Redis Cluster: Client is a *redis.ClusterClient
}

// RealRedis returns the address of the real redis-server tests may use, or
// "" when none is configured.
func RealRedis() string { return os.Getenv(RedisAddrEnv) }

// Backends returns miniredis, plus the real Redis named by RedisAddrEnv when
// it is set, plus the package's shared Redis Cluster when its TestMain is
// Main and redis-server is installed. Keys a test leaves on a real server
// are deleted at cleanup.
func Backends(t testing.TB) []Backend {
	t.Helper()
	m := miniredis.RunT(t)
	out := []Backend{{Name: "miniredis", Addr: m.Addr(), Prefix: "reclaim:", Mini: m}}
	if addr := RealRedis(); addr != "" {
		out = append(out, Backend{Name: "redis", Addr: addr, Prefix: RealPrefix(t, addr)})
	}
	if c := sharedCluster(t); c != nil {
		addr := strings.Join(c.Addrs(), ",")
		out = append(out, Backend{Name: "cluster", Addr: addr, Prefix: RealPrefix(t, addr), Cluster: true})
	}
	return out
}

// Addrs returns the backend's addresses (one, or a cluster's nodes).
func (b Backend) Addrs() []string { return Addrs(b.Addr) }

// Addrs splits a comma-separated list of addresses.
func Addrs(addr string) []string { return strings.Split(addr, ",") }

// shared is the cluster every test of a package shares (see Main).
var shared struct {
	enabled bool
	once    sync.Once
	c       *redistest.Cluster
	err     error
}

// Main runs a package's tests (call it from TestMain) with a shared loopback
// Redis Cluster as one more backend of Backends: the cluster starts at the
// first test that asks for backends and stops, by PID, when the tests end.
// Without redis-server or redis-cli, or with RECLAIM_TEST_CLUSTER=0, there
// is no cluster backend.
func Main(m *testing.M) int {
	shared.enabled = redistest.ClusterAvailable() && os.Getenv(ClusterEnv) != "0"
	code := m.Run()
	if shared.c != nil {
		shared.c.Stop()
	}
	return code
}

func sharedCluster(t testing.TB) *redistest.Cluster {
	if !shared.enabled {
		return nil
	}
	shared.once.Do(func() { shared.c, shared.err = redistest.NewCluster() })
	if shared.err != nil {
		t.Fatalf("shared redis cluster: %v", shared.err)
	}
	return shared.c
}

// RealPrefix returns a fresh key prefix on the real Redis at addr (a
// cluster's comma-separated nodes) and deletes every key under it when the
// test ends.
func RealPrefix(t testing.TB, addr string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "reclaimtest:" + hex.EncodeToString(b[:]) + ":"
	t.Cleanup(func() {
		c := NewClient(addr)
		defer c.Close()
		ctx := context.Background()
		_ = ScanKeys(ctx, c, prefix+"*", func(k string) error { return c.Del(ctx, k).Err() })
	})
	return prefix
}

// ForEachBackend runs f once per backend as a subtest.
func ForEachBackend(t *testing.T, f func(t *testing.T, b Backend)) {
	for _, b := range Backends(t) {
		t.Run(b.Name, func(t *testing.T) { f(t, b) })
	}
}

// Client returns a client of the backend (a cluster client for a
// cluster), closed when the test ends.
func (b Backend) Client(t testing.TB) redis.UniversalClient {
	c := NewClient(b.Addr)
	t.Cleanup(func() { c.Close() })
	return c
}

// NewClient returns a client of addr: a cluster client when addr lists
// several nodes (as Backend.Addr does for a cluster), the way the
// middleware's `redis: addrs:` decides.
func NewClient(addr string) redis.UniversalClient {
	return redis.NewUniversalClient(&redis.UniversalOptions{Addrs: Addrs(addr)})
}

// ScanKeys calls f for every key matching match: on every master of a
// cluster (concurrently, one goroutine per master), else on the server.
func ScanKeys(ctx context.Context, c redis.UniversalClient, match string, f func(key string) error) error {
	scan := func(ctx context.Context, c redis.Cmdable) error {
		iter := c.Scan(ctx, 0, match, 1000).Iterator()
		for iter.Next(ctx) {
			if err := f(iter.Val()); err != nil {
				return err
			}
		}
		return iter.Err()
	}
	if cc, ok := c.(*redis.ClusterClient); ok {
		err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return scan(ctx, m) })
		if err != nil {
			return fmt.Errorf("scan cluster: %w", err)
		}
		return nil
	}
	return scan(ctx, c)
}

// RealOrMini returns the real redis-server of RedisAddrEnv with a prefix
// of the test's own (its keys deleted at cleanup), or else a fresh
// miniredis and the default prefix: for measurements that want a real
// server's round trips when there is one.
func RealOrMini(t testing.TB) (addr, prefix string) {
	if addr := RealRedis(); addr != "" {
		return addr, RealPrefix(t, addr)
	}
	return miniredis.RunT(t).Addr(), "reclaim:"
}
