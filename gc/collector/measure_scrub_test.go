package collector

import (
	"context"
	"testing"
	"time"

	"github.com/reclaim-registry/reclaim/gc/internal/gctest"
	"github.com/reclaim-registry/reclaim/redisstate"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

// TestMeasureScrub counts one tick's scrub (ScrubRepos = 2, the default)
// on the registry of R repositories of
// TestMeasureCollectDoesNotGrowWithRegistry, with the cursor on Redis
// (RECLAIM_TEST_REDIS_ADDR, else miniredis): storage calls below the
// middleware and Redis round trips. Neither may grow with R; the names
// the catalog listing returns do on a driver without a native
// start-after (inmemory, filesystem), as they do for the usage refresh.
//
//	RECLAIM_TEST_REDIS_ADDR=127.0.0.1:6379 go test ./gc -run TestMeasureScrub -v
func TestMeasureScrub(t *testing.T) {
	var first gctest.Measured
	var firstRedis int64
	for i, R := range []int{10, 100} {
		r := newMeasureRig(t, R, 20)
		addr, prefix := storagetest.RealOrMini(t)
		client := storagetest.NewClient(addr)
		t.Cleanup(func() { client.Close() })
		counter := &storagetest.RedisCounter{}
		client.AddHook(counter)
		r.c.cfg.Repair = r.Env.Links
		rc, err := NewReclaimer(r.c, gctest.NewQueue(time.Now), ReclaimerConfig{Enabled: true, UsageRefresh: -1,
			ScrubCursor: redisstate.NewScrubCursor(client, prefix), Logf: t.Logf})
		if err != nil {
			t.Fatal(err)
		}
		var rep TickReport
		counter.Reset()
		m := gctest.Measure(r.Counting, r.W, func() { rc.scrub(context.Background(), &rep) })
		trips := gctest.Steady(counter)
		s := rep.Scrub
		if s.Repositories != DefaultScrubRepos || s.Failed != 0 || s.Repaired != 0 {
			t.Fatalf("R=%d: scrub %+v", R, s)
		}
		t.Logf("R=%4d one tick's scrub: %d repositories, %d forward links: %d storage calls (%.1f per repository), %d names listed, %d Redis round trips, %s  (%s)",
			R, s.Repositories, s.Links, m.Calls, float64(m.Calls)/float64(s.Repositories), m.Names, trips, m.Wall.Round(time.Microsecond), m.ByKind)
		if i == 0 {
			first, firstRedis = m, trips
			continue
		}
		if m.Calls != first.Calls || trips != firstRedis {
			t.Errorf("R=%d: scrub cost grew with the registry: %d calls, %d round trips; at R=10 %d, %d", R, m.Calls, trips, first.Calls, firstRedis)
		}
	}
}
