package registrytest

import (
	"testing"
	"time"

	"github.com/reclaim-registry/reclaim/internal/config"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

// Age lets d pass for r's reclaim middleware without sleeping through it:
// every access record and the recording epoch in r's Redis move d into the
// past (storagetest.Age, under the middleware's prefix), as if nothing had
// been accessed for d. The window, fences and the epoch are all timed by
// Redis's clock, so to GC that is d gone by.
//
// It moves the clock the middleware's request scopes time their checks by
// d forward too (middleware.Env.Age), so a request held across Age counts
// its checks d older, as one held for d would. It then waits out the
// middleware's per-process dedup (the dedup option, milliseconds in tests)
// so the next access is recorded again, as it would be d later. Pins still
// expire by wall time. Only for registries started by Start with the
// reclaim middleware.
func (r *Registry) Age(t testing.TB, d time.Duration) {
	t.Helper()
	if r.Server == nil || r.Server.Env() == nil {
		t.Fatal("registrytest: Age needs a registry started by Start with the reclaim middleware")
	}
	opts, _, err := config.Load(r.Config)
	if err == nil {
		opts, err = opts.WithDefaults()
	}
	if err != nil {
		t.Fatalf("registrytest: Age: %v", err)
	}
	storagetest.Age(t, r.Server.Env().Tracker.Client(), opts.Prefix, d)
	r.Server.Env().Age(d)
	time.Sleep(2 * opts.Dedup)
}
