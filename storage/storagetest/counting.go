package storagetest

import (
	"context"
	"maps"
	"net"
	"strings"
	"sync"
	"sync/atomic"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	storagemiddleware "github.com/distribution/distribution/v3/registry/storage/driver/middleware"
	"github.com/redis/go-redis/v9"
)

// Methods that change storage.
var writeMethods = map[string]bool{"PutContent": true, "Writer": true, "Move": true, "Delete": true}

// CountingDriver is a HookDriver that counts calls by method name (and
// records each, see Calls).
type CountingDriver struct {
	HookDriver
	mu     sync.Mutex
	counts map[string]int
	paths  []string
}

var _ storagedriver.StorageDriver = (*CountingDriver)(nil)

// NewCountingDriver wraps d.
func NewCountingDriver(d storagedriver.StorageDriver) *CountingDriver {
	c := &CountingDriver{counts: map[string]int{}}
	c.HookDriver = HookDriver{StorageDriver: d, Before: c.count}
	return c
}

func (c *CountingDriver) count(_ context.Context, method, path string) error {
	c.mu.Lock()
	c.counts[method]++
	c.paths = append(c.paths, method+" "+path)
	c.mu.Unlock()
	return nil
}

// Counts returns a copy of the counts by method.
func (c *CountingDriver) Counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.counts)
}

// Calls returns every call as "Method path", in order.
func (c *CountingDriver) Calls() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.paths...)
}

// Total is the number of calls; Writes the number that change storage.
func (c *CountingDriver) Total() (total, writes int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for m, n := range c.counts {
		total += n
		if writeMethods[m] {
			writes += n
		}
	}
	return total, writes
}

// Reset zeroes the counts.
func (c *CountingDriver) Reset() {
	c.mu.Lock()
	c.counts = map[string]int{}
	c.paths = nil
	c.mu.Unlock()
}

var (
	lastMu      sync.Mutex
	lastCounter *CountingDriver
)

// LastCounting returns the CountingDriver the "count" middleware built most
// recently (nil if none).
func LastCounting() *CountingDriver {
	lastMu.Lock()
	defer lastMu.Unlock()
	return lastCounter
}

func init() {
	_ = storagemiddleware.Register("count", func(_ context.Context, d storagedriver.StorageDriver, _ map[string]any) (storagedriver.StorageDriver, error) {
		c := NewCountingDriver(d)
		lastMu.Lock()
		lastCounter = c
		lastMu.Unlock()
		return c, nil
	})
}

// RedisCounter is a go-redis hook counting round trips: one per command,
// one per pipeline. Commands also counts them by command name, so that
// connection setup (hello, client) can be told from steady-state work.
type RedisCounter struct {
	n     atomic.Int64
	mu    sync.Mutex
	names map[string]int64
}

var _ redis.Hook = (*RedisCounter)(nil)

// Count returns the round trips so far.
func (c *RedisCounter) Count() int64 { return c.n.Load() }

// Commands returns the commands so far by lower-case name ("pipeline" for
// pipelines).
func (c *RedisCounter) Commands() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.names)
}

// Reset zeroes the counts.
func (c *RedisCounter) Reset() {
	c.n.Store(0)
	c.mu.Lock()
	c.names = nil
	c.mu.Unlock()
}

func (c *RedisCounter) add(name string) {
	c.n.Add(1)
	c.mu.Lock()
	if c.names == nil {
		c.names = map[string]int64{}
	}
	c.names[strings.ToLower(name)]++
	c.mu.Unlock()
}

func (c *RedisCounter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (c *RedisCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.add(cmd.Name())
		return next(ctx, cmd)
	}
}

func (c *RedisCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.add("pipeline")
		return next(ctx, cmds)
	}
}
