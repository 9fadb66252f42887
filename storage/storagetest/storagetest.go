// Package storagetest has storage-driver and Redis wrappers for tests and
// measurements: a driver that counts calls by method, a driver whose calls
// can be paused or failed at chosen points (to force interleavings), and a
// go-redis hook that counts round trips.
//
// Importing it registers the storage middleware "count" (config.yml:
// `middleware: storage: - name: count`); list it before "reclaim" to count
// the calls that reach the real driver, reverse-link writes included.
package storagetest

import (
	"context"
	"io"
	"maps"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	storagemiddleware "github.com/distribution/distribution/v3/registry/storage/driver/middleware"
	"github.com/redis/go-redis/v9"
)

// Methods that change storage.
var writeMethods = map[string]bool{"PutContent": true, "Writer": true, "Move": true, "Delete": true}

// CountingDriver counts calls by method name (and by method+path kind, see
// Calls).
type CountingDriver struct {
	storagedriver.StorageDriver
	mu     sync.Mutex
	counts map[string]int
	paths  []string
}

var _ storagedriver.StorageDriver = (*CountingDriver)(nil)

// NewCountingDriver wraps d.
func NewCountingDriver(d storagedriver.StorageDriver) *CountingDriver {
	return &CountingDriver{StorageDriver: d, counts: map[string]int{}}
}

func (c *CountingDriver) count(method, path string) {
	c.mu.Lock()
	c.counts[method]++
	c.paths = append(c.paths, method+" "+path)
	c.mu.Unlock()
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

func (c *CountingDriver) GetContent(ctx context.Context, path string) ([]byte, error) {
	c.count("GetContent", path)
	return c.StorageDriver.GetContent(ctx, path)
}

func (c *CountingDriver) PutContent(ctx context.Context, path string, content []byte) error {
	c.count("PutContent", path)
	return c.StorageDriver.PutContent(ctx, path, content)
}

func (c *CountingDriver) Reader(ctx context.Context, path string, offset int64) (io.ReadCloser, error) {
	c.count("Reader", path)
	return c.StorageDriver.Reader(ctx, path, offset)
}

func (c *CountingDriver) Writer(ctx context.Context, path string, a bool) (storagedriver.FileWriter, error) {
	c.count("Writer", path)
	return c.StorageDriver.Writer(ctx, path, a)
}

func (c *CountingDriver) Stat(ctx context.Context, path string) (storagedriver.FileInfo, error) {
	c.count("Stat", path)
	return c.StorageDriver.Stat(ctx, path)
}

func (c *CountingDriver) List(ctx context.Context, path string) ([]string, error) {
	c.count("List", path)
	return c.StorageDriver.List(ctx, path)
}

func (c *CountingDriver) Move(ctx context.Context, src, dst string) error {
	c.count("Move", dst)
	return c.StorageDriver.Move(ctx, src, dst)
}

func (c *CountingDriver) Delete(ctx context.Context, path string) error {
	c.count("Delete", path)
	return c.StorageDriver.Delete(ctx, path)
}

func (c *CountingDriver) RedirectURL(r *http.Request, path string) (string, error) {
	c.count("RedirectURL", path)
	return c.StorageDriver.RedirectURL(r, path)
}

func (c *CountingDriver) Walk(ctx context.Context, path string, f storagedriver.WalkFn, opts ...func(*storagedriver.WalkOptions)) error {
	c.count("Walk", path)
	return c.StorageDriver.Walk(ctx, path, f, opts...)
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

// HookDriver calls Before ahead of every driver call (and After once the
// call returned). A hook may block to pause that side of an interleaving, or
// return an error to fail the call.
type HookDriver struct {
	storagedriver.StorageDriver
	Before func(ctx context.Context, method, path string) error
	After  func(ctx context.Context, method, path string, err error)
}

var _ storagedriver.StorageDriver = (*HookDriver)(nil)

func (h *HookDriver) before(ctx context.Context, m, p string) error {
	if h.Before == nil {
		return nil
	}
	return h.Before(ctx, m, p)
}

func (h *HookDriver) after(ctx context.Context, m, p string, err error) {
	if h.After != nil {
		h.After(ctx, m, p, err)
	}
}

func (h *HookDriver) GetContent(ctx context.Context, path string) ([]byte, error) {
	if err := h.before(ctx, "GetContent", path); err != nil {
		return nil, err
	}
	b, err := h.StorageDriver.GetContent(ctx, path)
	h.after(ctx, "GetContent", path, err)
	return b, err
}

func (h *HookDriver) PutContent(ctx context.Context, path string, content []byte) error {
	if err := h.before(ctx, "PutContent", path); err != nil {
		return err
	}
	err := h.StorageDriver.PutContent(ctx, path, content)
	h.after(ctx, "PutContent", path, err)
	return err
}

func (h *HookDriver) Reader(ctx context.Context, path string, offset int64) (io.ReadCloser, error) {
	if err := h.before(ctx, "Reader", path); err != nil {
		return nil, err
	}
	r, err := h.StorageDriver.Reader(ctx, path, offset)
	h.after(ctx, "Reader", path, err)
	return r, err
}

func (h *HookDriver) Stat(ctx context.Context, path string) (storagedriver.FileInfo, error) {
	if err := h.before(ctx, "Stat", path); err != nil {
		return nil, err
	}
	fi, err := h.StorageDriver.Stat(ctx, path)
	h.after(ctx, "Stat", path, err)
	return fi, err
}

func (h *HookDriver) Move(ctx context.Context, src, dst string) error {
	if err := h.before(ctx, "Move", dst); err != nil {
		return err
	}
	err := h.StorageDriver.Move(ctx, src, dst)
	h.after(ctx, "Move", dst, err)
	return err
}

func (h *HookDriver) Delete(ctx context.Context, path string) error {
	if err := h.before(ctx, "Delete", path); err != nil {
		return err
	}
	err := h.StorageDriver.Delete(ctx, path)
	h.after(ctx, "Delete", path, err)
	return err
}

// Gate pauses the first call that matches (method, and a path containing
// substr) until Release. Reached is closed when that call arrives.
type Gate struct {
	Method, Substr string
	Reached        chan struct{}
	release        chan struct{}
	hit            atomic.Bool
}

// NewGate returns a closed-until-released gate for calls of method on paths
// containing substr.
func NewGate(method, substr string) *Gate {
	return &Gate{Method: method, Substr: substr, Reached: make(chan struct{}), release: make(chan struct{})}
}

// Wait blocks a matching call (the first one only) until Release.
func (g *Gate) Wait(ctx context.Context, method, path string) error {
	if method != g.Method || !strings.Contains(path, g.Substr) || g.hit.Swap(true) {
		return nil
	}
	close(g.Reached)
	select {
	case <-g.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Release lets the paused call go on.
func (g *Gate) Release() { close(g.release) }

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
