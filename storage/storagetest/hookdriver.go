package storagetest

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	storagemiddleware "github.com/distribution/distribution/v3/registry/storage/driver/middleware"
)

// HookDriver calls Before ahead of every driver call that names a path (and
// After once the call returned). A hook may block to pause that side of an
// interleaving, or return an error to fail the call. Move is reported with
// its destination.
type HookDriver struct {
	storagedriver.StorageDriver
	Before func(ctx context.Context, method, path string) error
	After  func(ctx context.Context, method, path string, err error)
}

var _ storagedriver.StorageDriver = (*HookDriver)(nil)

// hooked runs call between h's hooks; a Before error skips the call.
func hooked[T any](ctx context.Context, h *HookDriver, method, path string, call func() (T, error)) (T, error) {
	if h.Before != nil {
		if err := h.Before(ctx, method, path); err != nil {
			var zero T
			return zero, err
		}
	}
	v, err := call()
	if h.After != nil {
		h.After(ctx, method, path, err)
	}
	return v, err
}

// hookedErr is hooked for the calls that return only an error.
func hookedErr(ctx context.Context, h *HookDriver, method, path string, call func() error) error {
	_, err := hooked(ctx, h, method, path, func() (struct{}, error) { return struct{}{}, call() })
	return err
}

func (h *HookDriver) GetContent(ctx context.Context, path string) ([]byte, error) {
	return hooked(ctx, h, "GetContent", path, func() ([]byte, error) { return h.StorageDriver.GetContent(ctx, path) })
}

func (h *HookDriver) PutContent(ctx context.Context, path string, content []byte) error {
	return hookedErr(ctx, h, "PutContent", path, func() error { return h.StorageDriver.PutContent(ctx, path, content) })
}

func (h *HookDriver) Reader(ctx context.Context, path string, offset int64) (io.ReadCloser, error) {
	return hooked(ctx, h, "Reader", path, func() (io.ReadCloser, error) { return h.StorageDriver.Reader(ctx, path, offset) })
}

func (h *HookDriver) Writer(ctx context.Context, path string, a bool) (storagedriver.FileWriter, error) {
	return hooked(ctx, h, "Writer", path, func() (storagedriver.FileWriter, error) { return h.StorageDriver.Writer(ctx, path, a) })
}

func (h *HookDriver) Stat(ctx context.Context, path string) (storagedriver.FileInfo, error) {
	return hooked(ctx, h, "Stat", path, func() (storagedriver.FileInfo, error) { return h.StorageDriver.Stat(ctx, path) })
}

func (h *HookDriver) List(ctx context.Context, path string) ([]string, error) {
	return hooked(ctx, h, "List", path, func() ([]string, error) { return h.StorageDriver.List(ctx, path) })
}

func (h *HookDriver) Move(ctx context.Context, src, dst string) error {
	return hookedErr(ctx, h, "Move", dst, func() error { return h.StorageDriver.Move(ctx, src, dst) })
}

func (h *HookDriver) Delete(ctx context.Context, path string) error {
	return hookedErr(ctx, h, "Delete", path, func() error { return h.StorageDriver.Delete(ctx, path) })
}

func (h *HookDriver) RedirectURL(r *http.Request, path string) (string, error) {
	return hooked(r.Context(), h, "RedirectURL", path, func() (string, error) { return h.StorageDriver.RedirectURL(r, path) })
}

func (h *HookDriver) Walk(ctx context.Context, path string, f storagedriver.WalkFn, opts ...func(*storagedriver.WalkOptions)) error {
	return hookedErr(ctx, h, "Walk", path, func() error { return h.StorageDriver.Walk(ctx, path, f, opts...) })
}

// Hook is a pair of hooks (Before, After) that a test can replace while
// drivers built with it are in use. RegisterHook makes it a storage
// middleware, which puts a HookDriver into an app's driver chain (an app is
// built from its configuration, so a test cannot hand it a driver); each
// test sets the hooks it needs. The zero Hook calls nothing.
//
// After runs once the call below has returned and before its answer goes
// up the chain: a test that blocks there pauses a request right after a
// storage call did its work (a Stat that found the data, a write that
// landed), the place where a check's result can go stale.
type Hook struct {
	mu     sync.Mutex
	before func(ctx context.Context, method, path string) error
	after  func(ctx context.Context, method, path string, err error)
}

// RegisterHook registers the storage middleware name (list it in the
// configuration's `middleware: storage:`) and returns its hook.
func RegisterHook(name string) *Hook {
	h := &Hook{}
	_ = storagemiddleware.Register(name, func(_ context.Context, d storagedriver.StorageDriver, _ map[string]any) (storagedriver.StorageDriver, error) {
		return h.Driver(d), nil
	})
	return h
}

// Driver wraps d in a HookDriver whose Before is h's current hook.
func (h *Hook) Driver(d storagedriver.StorageDriver) *HookDriver {
	return &HookDriver{StorageDriver: d, Before: h.call, After: h.callAfter}
}

// SetAfter makes f the After hook until the test ends.
func (h *Hook) SetAfter(t testing.TB, f func(ctx context.Context, method, path string, err error)) {
	setUntilCleanup(t, &h.mu, &h.after, f)
}

func (h *Hook) callAfter(ctx context.Context, method, path string, err error) {
	h.mu.Lock()
	f := h.after
	h.mu.Unlock()
	if f != nil {
		f(ctx, method, path, err)
	}
}

// Set makes f the Before hook until the test ends.
func (h *Hook) Set(t testing.TB, f func(ctx context.Context, method, path string) error) {
	setUntilCleanup(t, &h.mu, &h.before, f)
}

// setUntilCleanup sets *p to f under mu, and back to nil when the test ends.
func setUntilCleanup[F any](t testing.TB, mu *sync.Mutex, p *F, f F) {
	mu.Lock()
	*p = f
	mu.Unlock()
	t.Cleanup(func() {
		mu.Lock()
		var zero F
		*p = zero
		mu.Unlock()
	})
}

func (h *Hook) call(ctx context.Context, method, path string) error {
	h.mu.Lock()
	f := h.before
	h.mu.Unlock()
	if f == nil {
		return nil
	}
	return f(ctx, method, path)
}

// Gate pauses the first call that matches (method, "" for any, and a path
// containing substr) until Release. Reached is closed when that call arrives.
type Gate struct {
	Method, Substr string
	// Match, when set, limits WaitAfter to the calls it accepts.
	Match   func(ctx context.Context) bool
	Reached chan struct{}
	release chan struct{}
	hit     atomic.Bool
}

// NewGate returns a closed-until-released gate for calls of method on paths
// containing substr.
func NewGate(method, substr string) *Gate {
	return &Gate{Method: method, Substr: substr, Reached: make(chan struct{}), release: make(chan struct{})}
}

// Wait blocks a matching call (the first one only) until Release.
func (g *Gate) Wait(ctx context.Context, method, path string) error {
	if (g.Method != "" && method != g.Method) || !strings.Contains(path, g.Substr) || g.hit.Swap(true) {
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

// WaitAfter is Wait as an After hook: it blocks the first matching call,
// once the call below has returned (whatever it answered), until Release.
// Match, when set, must also accept the call (the request it belongs to,
// say).
func (g *Gate) WaitAfter(ctx context.Context, method, path string, _ error) {
	if g.Match != nil && !g.Match(ctx) {
		return
	}
	_ = g.Wait(ctx, method, path)
}

// Release lets the paused call go on.
func (g *Gate) Release() { close(g.release) }
