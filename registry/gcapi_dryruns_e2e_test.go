package registry_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/reclaim-registry/reclaim/gc/collector"
	"github.com/reclaim-registry/reclaim/registry"
	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// Issue 25, item 6: dry runs took no lock and had no bound; 40 at once on
// a 1,000-tag repository slowed every pull. These tests count walks (the
// snapshot's read of a repository's tag link, in the storage hook) and
// force the interleavings with hooks.

// startDryRuns starts a GC registry with gc options extra and one image
// tagged latest in each of repos.
func startDryRuns(t *testing.T, extra map[string]any, repos ...string) *gcRegistry {
	t.Helper()
	opts := reclaimOptions(t, e2eWindow, "")
	gcOpts := map[string]any{"enabled": true}
	for k, v := range extra {
		gcOpts[k] = v
	}
	opts["gc"] = gcOpts
	g := completeGC(t, registrytest.Start(t, registrytest.WithStorageMiddleware("gchook", nil),
		registrytest.WithStorageMiddleware("reclaim", opts)))
	for _, repo := range repos {
		registrytest.PushImage(t, g.Registry, repo+":latest", 1)
	}
	return g
}

// dryRun posts a dry-run collect of repo and returns the status, the
// Retry-After header and the body; safe on any goroutine.
func (g *gcRegistry) dryRun(ctx context.Context, repo string) (int, string, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.URL+"/gc/v1/repositories/"+repo+"/collect?dry_run=true", nil)
	if err != nil {
		return 0, "", "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Retry-After"), string(b), err
}

// walkGate counts the walks of the repositories it watches and holds
// every walk at its tag read until release is closed.
type walkGate struct {
	walks, inFlight, maxInFlight atomic.Int64
	entered                      chan string
	release                      chan struct{}
}

func gateWalks(t *testing.T, repos ...string) *walkGate {
	w := &walkGate{entered: make(chan string, 64), release: make(chan struct{})}
	watched := map[string]string{}
	for _, r := range repos {
		watched[layout.TagCurrentPath(r, "latest")] = r
	}
	setHook(t, func(_ context.Context, method, path string) error {
		repo, ok := watched[path]
		if method != "GetContent" || !ok {
			return nil
		}
		w.walks.Add(1)
		n := w.inFlight.Add(1)
		for m := w.maxInFlight.Load(); n > m && !w.maxInFlight.CompareAndSwap(m, n); m = w.maxInFlight.Load() {
		}
		w.entered <- repo
		<-w.release
		w.inFlight.Add(-1)
		return nil
	})
	return w
}

// Identical dry runs at once share one walk: 8 concurrent dry runs of one
// repository make one walk, and all 8 get its report.
func TestConcurrentIdenticalDryRunsShareOneWalk(t *testing.T) {
	g := startDryRuns(t, nil, "co/app")
	const n = 8
	var joined atomic.Int64
	allJoined := make(chan struct{})
	registry.SetDryRunHooks(g.Server, collector.DryRunHooks{Joined: func(string, bool) {
		if joined.Add(1) == n {
			close(allJoined)
		}
	}})
	w := gateWalks(t, "co/app")
	type answer struct {
		code int
		body string
		err  error
	}
	answers := make(chan answer, n)
	for range n {
		go func() {
			code, _, body, err := g.dryRun(t.Context(), "co/app")
			answers <- answer{code, body, err}
		}()
	}
	<-w.entered // the first walk reads the tag
	<-allJoined // every dry run is registered (started the walk, or joined it)
	close(w.release)
	runIDs := map[string]bool{}
	for range n {
		a := <-answers
		if a.err != nil || a.code != http.StatusOK {
			t.Fatalf("dry run: %d %v %s", a.code, a.err, a.body)
		}
		runIDs[decodeReport(t, []byte(a.body)).RunID] = true
	}
	if got := w.walks.Load(); got != 1 || len(runIDs) != 1 {
		t.Fatalf("%d concurrent identical dry runs made %d walks with %d run ids; want 1 walk, one report", n, got, len(runIDs))
	}
	t.Logf("%d concurrent identical dry runs: %d walk", n, w.walks.Load())
}

// At most gc.dryruns walks at once: 5 dry runs of distinct repositories
// with a bound of 2 have at most 2 walks in flight; the others wait for a
// slot (hook) and get it as walks end.
func TestDryRunsBeyondTheBoundWait(t *testing.T) {
	repos := []string{"b/r0", "b/r1", "b/r2", "b/r3", "b/r4"}
	g := startDryRuns(t, map[string]any{"dryruns": 2, "dryrunwait": "10m"}, repos...)
	waiting := make(chan string, len(repos))
	registry.SetDryRunHooks(g.Server, collector.DryRunHooks{Waiting: func(repo string) { waiting <- repo }})
	w := gateWalks(t, repos...)
	var wg sync.WaitGroup
	errs := make(chan error, len(repos))
	for _, repo := range repos {
		wg.Go(func() {
			if code, _, body, err := g.dryRun(t.Context(), repo); err != nil || code != http.StatusOK {
				errs <- fmt.Errorf("dry run of %s: %d %v %s", repo, code, err, body)
			}
		})
	}
	<-w.entered
	<-w.entered
	for range len(repos) - 2 {
		<-waiting // the other three wait for a slot
	}
	if n := w.inFlight.Load(); n != 2 {
		t.Errorf("%d walks in flight, want 2", n)
	}
	close(w.release)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if w.maxInFlight.Load() != 2 || w.walks.Load() != int64(len(repos)) {
		t.Fatalf("%d walks, at most %d at once; want %d walks, at most 2 at once", w.walks.Load(), w.maxInFlight.Load(), len(repos))
	}
}

// With dryrunwait: 0s a dry run beyond the bound is refused at once: 429
// TOO_MANY_REQUESTS with Retry-After, and no walk.
func TestDryRunBeyondTheBoundIsRefused(t *testing.T) {
	g := startDryRuns(t, map[string]any{"dryruns": 2, "dryrunwait": "0s"}, "c/r0", "c/r1", "c/r2")
	w := gateWalks(t, "c/r0", "c/r1", "c/r2")
	done := make(chan int, 2)
	for _, repo := range []string{"c/r0", "c/r1"} {
		go func() {
			code, _, _, _ := g.dryRun(t.Context(), repo)
			done <- code
		}()
	}
	<-w.entered
	<-w.entered
	code, retry, body, err := g.dryRun(t.Context(), "c/r2")
	if err != nil || code != http.StatusTooManyRequests || retry == "" || !strings.Contains(body, "TOO_MANY_REQUESTS") {
		t.Fatalf("a third dry run with two walking: %d %q %v %s; want 429 TOO_MANY_REQUESTS with Retry-After", code, retry, err, body)
	}
	close(w.release)
	for range 2 {
		if c := <-done; c != http.StatusOK {
			t.Errorf("dry run inside the bound: %d", c)
		}
	}
	if got := w.walks.Load(); got != 2 {
		t.Errorf("%d walks, want 2 (the refused one walks nothing)", got)
	}
}
