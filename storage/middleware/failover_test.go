package middleware

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/reclaim-registry/reclaim/storage/storagetest/redistest"
)

// Pushes through a Redis Cluster failover: the master that holds the
// recording epoch is killed while clients push. Every push either succeeds
// or fails with 503 and Retry-After (clients retry), and every push the
// registry acknowledged pulls completely afterwards; the failed ones
// succeed when retried. (That GC trusts nothing lost in the failover is
// tracker/failover_test.go.)
func TestPushesThroughClusterFailover(t *testing.T) {
	c := redistest.StartCluster(t)
	a := newTestApp(t, appOptions{window: testWindow, redisAddr: strings.Join(c.Addrs(), ","), prefix: "reclaim:"})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	master, err := c.MasterFor(ctx, "reclaim:since")
	if err != nil {
		t.Fatal(err)
	}
	replica, err := c.ReplicaOf(ctx, master)
	if err != nil {
		t.Fatal(err)
	}
	rt := &statusRecorder{next: http.DefaultTransport}
	p := &pushers{a: a, rt: rt}
	promoted := make(chan struct{})
	p.run(2, promoted)
	t0 := time.Now()
	c.Kill(master)
	if err := c.WaitMaster(ctx, replica); err != nil {
		t.Fatal(err)
	}
	t1 := time.Now()
	close(promoted)
	p.wg.Wait()
	if p.err != nil {
		t.Fatal(p.err)
	}
	if n := rt.noRetryAfter.Load(); n > 0 {
		t.Fatalf("%d responses were 503 without Retry-After", n)
	}
	if rt.other.Load() > 0 {
		t.Fatalf("a response was a 5xx other than 503: %s", rt.firstOther.Load())
	}
	for _, ref := range p.ok {
		a.pullAll(ref)
	}
	for ref, img := range p.failed {
		if err := a.push(ref, img); err != nil {
			t.Fatalf("retrying %s after the failover: %v", ref, err)
		}
		a.pullAll(ref)
	}
	t.Logf("cluster failover under pushes: promoted %v after the kill; %d pushes acknowledged (%d after the promotion), %d failed retryably (%d responses 503 + Retry-After), all pull completely",
		t1.Sub(t0).Round(time.Millisecond), len(p.ok), p.okAfter, len(p.failed), rt.unavailable.Load())
}

// pushers push fresh images, one attempt each, until the replica is
// promoted and each has pushed twice more successfully.
type pushers struct {
	a       *testApp
	rt      *statusRecorder
	wg      sync.WaitGroup
	mu      sync.Mutex
	ok      []string
	okAfter int
	failed  map[string]v1.Image
	err     error
}

func (p *pushers) run(n int, promoted <-chan struct{}) {
	p.failed = map[string]v1.Image{}
	for g := range n {
		p.wg.Go(func() {
			after := 0
			for i := 0; after < 2; i++ {
				select {
				case <-promoted:
					after++
				default:
				}
				if !p.pushOne(fmt.Sprintf("r%d:v%d", g, i), after > 0) {
					return
				}
			}
		})
	}
}

// pushOne pushes one image; false ends the pusher (a wrong answer).
func (p *pushers) pushOne(ref string, afterPromotion bool) bool {
	img, err := random.Image(256, 2)
	if err == nil {
		err = p.a.push(ref, img, noRetry, remote.WithTransport(p.rt))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch code := statusOf(err); {
	case err == nil:
		p.ok = append(p.ok, ref)
		if afterPromotion {
			p.okAfter++
		}
	case code == http.StatusServiceUnavailable:
		p.failed[ref] = img
	default:
		if p.err == nil {
			p.err = fmt.Errorf("push %s during the failover: %v (status %d), want success or 503", ref, err, code)
		}
		return false
	}
	return true
}

// statusRecorder counts the registry's 5xx answers.
type statusRecorder struct {
	next                      http.RoundTripper
	unavailable, noRetryAfter atomic.Int64
	other                     atomic.Int64
	firstOther                atomic.Value
}

func (r *statusRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	switch {
	case resp.StatusCode == http.StatusServiceUnavailable:
		r.unavailable.Add(1)
		if resp.Header.Get("Retry-After") == "" {
			r.noRetryAfter.Add(1)
		}
	case resp.StatusCode >= 500:
		if r.other.Add(1) == 1 {
			r.firstOther.Store(fmt.Sprintf("%s %s: %d", req.Method, req.URL.Path, resp.StatusCode))
		}
	}
	return resp, nil
}
