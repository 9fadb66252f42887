package reclaimer

import (
	"context"
	"testing"
	"time"

	"github.com/reclaim-registry/reclaim/gc/collector"
	"github.com/reclaim-registry/reclaim/gc/internal/gctest"
	"github.com/reclaim-registry/reclaim/redisstate"
	"github.com/reclaim-registry/reclaim/storage/middleware"
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
//	RECLAIM_TEST_REDIS_ADDR=127.0.0.1:6379 go test ./gc/reclaimer -run TestMeasureScrub -v
func TestMeasureScrub(t *testing.T) {
	var first gctest.Measured
	var firstRedis int64
	for i, R := range []int{10, 100} {
		r := gctest.NewMeasureRig(t, R, 20)
		addr, prefix := storagetest.RealOrMini(t)
		client := storagetest.NewClient(addr)
		t.Cleanup(func() { client.Close() })
		counter := &storagetest.RedisCounter{}
		client.AddHook(counter)
		c, err := collector.New(collector.Config{Driver: r.Env.Driver, Tracker: fakeTracker{r.Tracker}, Links: r.Env.Links,
			Context: middleware.WithoutAccessRecords, LinkDBComplete: func(context.Context) (bool, error) { return true, nil },
			Window: time.Hour, Now: r.Tracker.Clock})
		if err != nil {
			t.Fatal(err)
		}
		rc, err := New(Config{Collector: c, Queue: gctest.NewQueue(time.Now), Driver: r.Env.Driver, Context: middleware.WithoutAccessRecords,
			Repair: r.Env.Links, Now: r.Tracker.Clock, Enabled: true, UsageRefresh: -1,
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
