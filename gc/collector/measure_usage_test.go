package collector

import (
	"context"
	"testing"
	"time"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/redisstate"
	"github.com/reclaim-registry/reclaim/storage/middleware"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

// TestMeasureUsageRefresh counts one usage refresh of the target
// repository (a dry run, its usage checks and the write of the record)
// next to a plain dry run, on the registry of R repositories of
// TestMeasureCollectDoesNotGrowWithRegistry, with the real tracker and
// usage store on Redis (RECLAIM_TEST_REDIS_ADDR, else miniredis): storage
// calls below the middleware and Redis round trips. Neither may grow
// with R.
//
//	RECLAIM_TEST_REDIS_ADDR=127.0.0.1:6379 go test ./gc -run TestMeasureUsageRefresh -v
func TestMeasureUsageRefresh(t *testing.T) {
	var first [2]measured
	var firstRedis [2]int64
	for i, R := range []int{10, 100} {
		r := newMeasureRig(t, R, 20)
		addr, prefix := storagetest.RealOrMini(t)
		client := storagetest.NewClient(addr)
		t.Cleanup(func() { client.Close() })
		counter := &storagetest.RedisCounter{}
		client.AddHook(counter)
		tr, err := redisstate.NewTracker(client, redisstate.TrackerOptions{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.StartRecording(r.ctx); err != nil {
			t.Fatal(err)
		}
		storagetest.Age(t, client, prefix, 2*time.Hour)
		collector := func(usage UsageStore) *Collector {
			c, err := New(Config{Driver: r.env.Driver, Tracker: &redisTracker{Tracker: tr}, Links: r.env.Links, Usage: usage, Clock: tr, Freed: tr,
				Context: middleware.WithoutAccessRecords, LinkDBComplete: func(context.Context) (bool, error) { return true, nil }, Window: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		plain, withUsage := collector(nil), collector(redisstate.NewUsageStore(client, prefix))
		var u reclaim.Usage
		var redisTrips [2]int64
		counter.Reset()
		mDry := measure(r.counting, r.w, func() {
			if _, err := plain.Collect(r.ctx, "target/app", RunOptions{DryRun: true}); err != nil {
				t.Fatal(err)
			}
		})
		redisTrips[0] = steady(counter)
		counter.Reset()
		mUsage := measure(r.counting, r.w, func() {
			if u, _, err = withUsage.Usage(r.ctx, "target/app"); err != nil {
				t.Fatal(err)
			}
		})
		redisTrips[1] = steady(counter)
		if u.ReclaimableBytes == 0 || u.ExclusiveBytes < u.ReclaimableBytes || u.SharedBlobs != 2 || u.UncertainBlobs != 0 {
			t.Fatalf("R=%d: usage %+v; want the untagged half reclaimable and the two bases shared", R, u)
		}
		t.Logf("R=%4d dry run: %4d storage calls, %3d Redis round trips  (%s)", R, mDry.calls, redisTrips[0], mDry.byKind)
		t.Logf("       refresh: %4d storage calls, %3d Redis round trips  (%s)", mUsage.calls, redisTrips[1], mUsage.byKind)
		t.Logf("       usage: reclaimable %d B (%d blobs), exclusive %d B (%d blobs), %d shared of %d", u.ReclaimableBytes,
			u.ReclaimableBlobs, u.ExclusiveBytes, u.ExclusiveBlobs, u.SharedBlobs, u.Blobs)
		if i == 0 {
			first, firstRedis = [2]measured{mDry, mUsage}, redisTrips
			continue
		}
		for j, m := range []measured{mDry, mUsage} {
			if m.calls != first[j].calls || redisTrips[j] != firstRedis[j] {
				t.Errorf("R=%d: cost grew with the registry: %d calls, %d round trips; at R=10 %d, %d", R, m.calls, redisTrips[j], first[j].calls, firstRedis[j])
			}
		}
	}
}

// steady is the round trips counted, less connection setup: each new
// pooled connection sends hello (and client setinfo) in a pipeline of its
// own, and how many the pool opens depends on the concurrency of the
// moment.
func steady(c *storagetest.RedisCounter) int64 {
	cmds := c.Commands()
	return c.Count() - cmds["hello"] - cmds["client"] - min(cmds["pipeline"], cmds["hello"])
}
