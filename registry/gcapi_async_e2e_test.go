package registry_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

// These tests hold an asynchronous collect to its promise: a 202 names a
// run whose record (findable by id, from any instance) is in Redis and
// whose repository lock is held, so its status URL resolves at once and for
// as long as the record lives, even if the process dies right after.

// forEachRedis runs f on miniredis and, when RECLAIM_TEST_REDIS_ADDR is
// set, on the real Redis; opts are the reclaim middleware's, with a key
// prefix of their own, for every instance of the test to share.
func forEachRedis(t *testing.T, f func(t *testing.T, opts map[string]any)) {
	addrs := map[string]string{"miniredis": miniredis.RunT(t).Addr()}
	if a := storagetest.RealRedis(); a != "" {
		addrs["redis"] = a
	}
	for _, name := range []string{"miniredis", "redis"} {
		if addrs[name] == "" {
			continue
		}
		t.Run(name, func(t *testing.T) { f(t, reclaimOptions(t, e2eWindow, addrs[name])) })
	}
}

// startShared starts a registry with the gchook and reclaim middlewares on
// opts, and a second instance on the same storage and Redis.
func startShared(t *testing.T, opts map[string]any) (g *gcRegistry, other *registrytest.Registry) {
	t.Helper()
	g = completeGC(t, registrytest.Start(t, registrytest.WithStorageMiddleware("gchook", nil),
		registrytest.WithStorageMiddleware("reclaim", opts)))
	other = registrytest.Start(t, registrytest.WithStorageMiddleware("reclaim", opts), registrytest.WithRootDirectory(g.Root))
	return g, other
}

// redisGate acts on the commands of a Redis client that match: it fails
// them (fail set) or holds them until release (the first one only).
type redisGate struct {
	match   func(args []any) bool
	fail    atomic.Bool
	hold    atomic.Bool
	once    sync.Once
	reached chan struct{}
	release chan struct{}
}

var errInjected = errors.New("injected: redis unavailable")

func newRedisGate(c redis.UniversalClient, match func(args []any) bool) *redisGate {
	g := &redisGate{match: match, reached: make(chan struct{}), release: make(chan struct{})}
	c.AddHook(g)
	return g
}

// act runs before a matching command: nil lets it go on.
func (g *redisGate) act(cmd redis.Cmder) error {
	if !g.match(cmd.Args()) {
		return nil
	}
	if g.fail.Load() {
		cmd.SetErr(errInjected)
		return errInjected
	}
	if g.hold.Load() {
		g.once.Do(func() {
			close(g.reached)
			<-g.release
		})
	}
	return nil
}

func (g *redisGate) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *redisGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := g.act(cmd); err != nil {
			return err
		}
		return next(ctx, cmd)
	}
}

func (g *redisGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var pass []redis.Cmder
		var failed error
		for _, c := range cmds {
			if err := g.act(c); err != nil {
				failed = err
				continue
			}
			pass = append(pass, c)
		}
		if len(pass) > 0 {
			if err := next(ctx, pass); err != nil {
				return err
			}
		}
		return failed
	}
}

// runIDWrite matches the write of a run's id index (<prefix>runid:<id>).
func runIDWrite(args []any) bool {
	k, _ := argAt(args, 1)
	return strings.EqualFold(fmt.Sprint(args[0]), "set") && strings.Contains(k, "runid:")
}

// runRecordWrite matches the script that takes a repository's lock and
// writes its run record (its keys: the lock, the record ...:r:<id>, ...).
func runRecordWrite(args []any) bool {
	name := strings.ToLower(fmt.Sprint(args[0]))
	if name != "evalsha" && name != "eval" {
		return false
	}
	k, _ := argAt(args, 4) // EVALSHA sha numkeys lock record ...
	return strings.Contains(k, "}:r:")
}

func argAt(args []any, i int) (string, bool) {
	if i >= len(args) {
		return "", false
	}
	s, ok := args[i].(string)
	return s, ok
}

type accepted struct {
	RunID     string `json:"run_id"`
	Status    string `json:"status"`
	StatusURL string `json:"status_url"`
}

// runStatus GETs a run's status URL on r.
func runStatus(t *testing.T, r *registrytest.Registry, url string) (int, string, []byte) {
	t.Helper()
	resp := r.Do(t, http.MethodGet, url, nil)
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
	}
	var raw json.RawMessage
	_ = json.NewDecoder(resp.Body).Decode(&raw)
	_ = json.Unmarshal(raw, &body)
	return resp.StatusCode, body.Status, raw
}

// An async collect answers 202 only once its record is in Redis: while
// Redis stalls on the run's id index, no answer; right after the 202 the
// status URL answers 200 "running" on this instance and on another one
// (which reads Redis), while the run is held at its first step. Meanwhile
// every other collect of the repository gets 409 GC_BUSY at once, as a
// synchronous collect does.
func TestE2EAsyncCollectAnswersAfterItsRecord(t *testing.T) {
	forEachRedis(t, func(t *testing.T, opts map[string]any) {
		g, other := startShared(t, opts)
		push(t, g, "r:v1", registrytest.Image(t, layer(t)))
		g.settle(t)

		// the run's first step after BeginRun, its snapshot's walk, waits
		// until the test lets it go
		walking, walk := make(chan struct{}), make(chan struct{})
		var walkOnce sync.Once
		setHook(t, func(_ context.Context, method, path string) error {
			if method == "Walk" && path == layout.ManifestsDir("r") {
				walkOnce.Do(func() { close(walking) })
				<-walk
			}
			return nil
		})
		var walkFree sync.Once
		letWalk := func() { walkFree.Do(func() { close(walk) }) }
		t.Cleanup(letWalk)

		stall := newRedisGate(g.Server.Env().Tracker.Client(), runIDWrite)
		stall.hold.Store(true)
		type result struct {
			code int
			body []byte
		}
		done := make(chan result, 1)
		go func() {
			code, body := g.post(t, "/gc/v1/repositories/r/collect?async=true&dry_run=false")
			done <- result{code, body}
		}()
		select {
		case <-stall.reached:
		case res := <-done:
			t.Fatalf("answered %d %s without writing the run's id index", res.code, res.body)
		case <-time.After(10 * time.Second):
			t.Fatal("the collect never wrote its run's id index")
		}
		select {
		case res := <-done:
			t.Fatalf("answered %d %s while its run's record was still being written", res.code, res.body)
		case <-time.After(300 * time.Millisecond):
		}
		close(stall.release)
		res := <-done
		if res.code != http.StatusAccepted {
			t.Fatalf("async collect: %d %s", res.code, res.body)
		}
		var acc accepted
		if err := json.Unmarshal(res.body, &acc); err != nil || acc.RunID == "" || acc.StatusURL != "/gc/v1/runs/"+acc.RunID {
			t.Fatalf("202 body %s: %v", res.body, err)
		}
		for name, r := range map[string]*registrytest.Registry{"this instance": g.Registry, "another instance": other} {
			if code, status, body := runStatus(t, r, acc.StatusURL); code != http.StatusOK || status != "running" {
				t.Errorf("GET %s on %s right after the 202: %d %s, want 200 running", acc.StatusURL, name, code, body)
			}
		}

		<-walking // the run is certainly in progress, holding the lock
		expectBusy(t, map[string]*registrytest.Registry{"this instance": g.Registry, "another instance": other})
		letWalk()
		waitRunDone(t, other, acc.StatusURL)
	})
}

// expectBusy checks that every collect of r, sync or async, on each of
// regs answers 409 GC_BUSY at once while a run holds r's lock.
func expectBusy(t *testing.T, regs map[string]*registrytest.Registry) {
	t.Helper()
	for _, q := range []string{"dry_run=false", "dry_run=false&async=true"} {
		for name, r := range regs {
			start := time.Now()
			resp := r.Do(t, http.MethodPost, "/gc/v1/repositories/r/collect?"+q, nil)
			var e apiErrors
			_ = json.NewDecoder(resp.Body).Decode(&e)
			resp.Body.Close()
			if resp.StatusCode != http.StatusConflict || len(e.Errors) != 1 || e.Errors[0].Code != "GC_BUSY" {
				t.Errorf("collect?%s on %s while an async run holds the lock: %d %+v, want 409 GC_BUSY", q, name, resp.StatusCode, e)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("collect?%s on %s took %v to answer 409", q, name, d)
			}
		}
	}
}

// waitRunDone polls statusURL on r until the run is done; it must say
// running until then.
func waitRunDone(t *testing.T, r *registrytest.Registry, statusURL string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, status, body := runStatus(t, r, statusURL)
		if code == http.StatusOK && status == "done" {
			return
		}
		if code != http.StatusOK || status != "running" || time.Now().After(deadline) {
			t.Fatalf("GET %s on another instance: %d %s, want running, then done", statusURL, code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// When Redis cannot take the run's record (the lock-and-record script) or
// its id index, an async collect answers 503 in the API's error format,
// never a 202 whose status URL would answer 404 for ever; and it leaves
// the repository unlocked: the next collect runs.
func TestE2EAsyncCollectRecordWriteFails(t *testing.T) {
	for _, tc := range []struct {
		name  string
		match func(args []any) bool
	}{
		{"record", runRecordWrite},
		{"id index", runIDWrite},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forEachRedis(t, func(t *testing.T, opts map[string]any) {
				g, other := startShared(t, opts)
				push(t, g, "r:v1", registrytest.Image(t, layer(t)))
				g.settle(t)
				fail := newRedisGate(g.Server.Env().Tracker.Client(), tc.match)
				fail.fail.Store(true)
				code, body := g.post(t, "/gc/v1/repositories/r/collect?async=true&dry_run=false")
				if code != http.StatusServiceUnavailable {
					var acc accepted
					_ = json.Unmarshal(body, &acc)
					if acc.StatusURL != "" { // what the client can find out
						c, _, b := runStatus(t, other, acc.StatusURL)
						t.Logf("its status URL %s, on another instance: %d %s", acc.StatusURL, c, b)
					}
					t.Fatalf("async collect while Redis cannot take the run's %s: %d %s, want 503", tc.name, code, body)
				}
				if c, r := decodeErr(t, body); c != "GC_ABORTED" || r != "redis_unavailable" {
					t.Fatalf("503 body %s, want GC_ABORTED redis_unavailable", body)
				}
				fail.fail.Store(false)
				if code, body := g.post(t, "/gc/v1/repositories/r/collect?dry_run=false"); code != http.StatusOK {
					t.Fatalf("the next collect: %d %s, want 200 (the failed one must not keep the lock)", code, body)
				}
			})
		})
	}
}
