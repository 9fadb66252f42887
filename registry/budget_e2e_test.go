package registry_test

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/distribution/distribution/v3/configuration"
	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"

	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/storage/budget"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

// withBudget sets the reclaim entry's budget block.
func withBudget(rate, inflight int) registrytest.Option {
	return registrytest.WithConfig(func(c *configuration.Configuration) {
		for i, m := range c.Middleware["storage"] {
			if m.Name == "reclaim" {
				c.Middleware["storage"][i].Options["budget"] = map[string]any{"rate": rate, "inflight": inflight}
			}
		}
	})
}

// TestE2EBudgetSlowDown: a collect runs while GC holds the budget's one
// in-flight slot and then while the store answers SlowDown to GC's calls.
// A client's pull is served while GC holds the slot (its storage calls go
// straight to the store); the collect completes, its throttled calls
// retried; GC's rate is halved; no client call is counted, throttled or
// retried.
func TestE2EBudgetSlowDown(t *testing.T) {
	g := startGC(t, withBudget(500, 1))
	a1 := push(t, g, "budget/a:v1", registrytest.RandomImage(t, 2, "linux", "amd64"))
	push(t, g, "budget/a:v1", registrytest.RandomImage(t, 2, "linux", "amd64")) // a1 untagged
	g.settle(t)

	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var clientCalls, slowDowns atomic.Int64
	setHook(t, func(ctx context.Context, method, path string) error {
		if !budget.Marked(ctx) {
			clientCalls.Add(1)
			return nil
		}
		once.Do(func() { close(held); <-release })
		// then the store throttles GC's next three calls
		if slowDowns.Add(1) <= 3 {
			return storagedriver.Error{DriverName: "s3aws", Detail: storagetest.SlowDownError{}}
		}
		return nil
	})

	type answer struct {
		code int
		body []byte
	}
	done := make(chan answer, 1)
	go func() {
		code, body := g.post(t, "/gc/v1/repositories/budget/a/collect")
		done <- answer{code, body}
	}()
	<-held // GC is in the store with the budget's only slot
	before := clientCalls.Load()
	registrytest.AssertPullable(t, g.Registry, "budget/a:v1")
	if clientCalls.Load() == before {
		t.Fatal("the pull made no storage call: nothing shows it passed GC's budget")
	}
	close(release)

	a := <-done
	if a.code != http.StatusOK {
		t.Fatalf("collect under SlowDown: %d %s", a.code, a.body)
	}
	if rep := decodeReport(t, a.body); !contains(rep.ManifestsDeleted, a1) {
		t.Fatalf("collect deleted %v, want the untagged %s", rep.ManifestsDeleted, a1)
	}
	b := g.Server.Env().Budget
	st := b.Stats()
	if st.Throttled.Load() != 3 || st.Retries.Load() != 3 || st.Clients.Load() != 0 {
		t.Fatalf("throttled %d, retried %d, clients throttled %d; want 3, 3, 0", st.Throttled.Load(), st.Retries.Load(), st.Clients.Load())
	}
	if st.Cuts.Load() < 1 || b.Limit() >= 500 {
		t.Fatalf("%d cuts, rate %.0f/s: GC did not slow down", st.Cuts.Load(), b.Limit())
	}
	if n := st.Requests.Load(); n < 10 {
		t.Fatalf("the budget counted %d GC requests for a collect", n)
	}
	registrytest.AssertPullable(t, g.Registry, "budget/a:v1")
}
