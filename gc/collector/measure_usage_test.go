package collector

import (
	"context"
	"testing"
	"time"

	"github.com/reclaim-registry/reclaim/gc/internal/gctest"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/redisstate"
	"github.com/reclaim-registry/reclaim/redisstate/usage"
	"github.com/reclaim-registry/reclaim/storage/middleware"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

// TestMeasureUsageRefresh counts one usage refresh of the target
// repository (a dry run, its usage checks and the write of the record)
// next to a plain dry run and, last, a real collect, on the registry of R repositories of
// TestMeasureCollectDoesNotGrowWithRegistry, with the real tracker and
// usage store on Redis (RECLAIM_TEST_REDIS_ADDR, else miniredis): storage
// calls below the middleware and Redis round trips. Neither may grow
// with R.
//
//	RECLAIM_TEST_REDIS_ADDR=127.0.0.1:6379 go test ./gc/collector -run TestMeasureUsageRefresh -v
func TestMeasureUsageRefresh(t *testing.T) {
	var first [3]gctest.Measured
	var firstRedis [3]int64
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
		if err := tr.StartRecording(r.Ctx); err != nil {
			t.Fatal(err)
		}
		storagetest.Age(t, client, prefix, 2*time.Hour)
		collector := func(store UsageStore) *Collector {
			c, err := New(Config{Driver: r.Env.Driver, Tracker: &redisTracker{Tracker: tr}, Links: r.Env.Links, Usage: store, Clock: tr, Freed: tr,
				Context: middleware.WithoutAccessRecords, LinkDBComplete: func(context.Context) (bool, error) { return true, nil }, Window: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		plain, withUsage := collector(nil), collector(usage.New(client, prefix))
		var u reclaim.Usage
		var redisTrips [3]int64
		counter.Reset()
		mDry := gctest.Measure(r.Counting, r.W, func() {
			if _, err := plain.Collect(r.Ctx, "target/app", RunOptions{DryRun: true}); err != nil {
				t.Fatal(err)
			}
		})
		redisTrips[0] = gctest.Steady(counter)
		counter.Reset()
		mUsage := gctest.Measure(r.Counting, r.W, func() {
			if u, _, err = withUsage.Usage(r.Ctx, "target/app"); err != nil {
				t.Fatal(err)
			}
		})
		redisTrips[1] = gctest.Steady(counter)
		counter.Reset()
		var rep *Report
		mCollect := gctest.Measure(r.Counting, r.W, func() {
			if rep, err = plain.Collect(r.Ctx, "target/app", RunOptions{}); err != nil {
				t.Fatal(err)
			}
		})
		redisTrips[2] = gctest.Steady(counter)
		if u.ReclaimableBytes == 0 || u.ExclusiveBytes < u.ReclaimableBytes || u.SharedBlobs != 2 || u.UncertainBlobs != 0 {
			t.Fatalf("R=%d: usage %+v; want the untagged half reclaimable and the two bases shared", R, u)
		}
		t.Logf("R=%4d dry run: %4d storage calls, %3d Redis round trips  (%s)", R, mDry.Calls, redisTrips[0], mDry.ByKind)
		t.Logf("       refresh: %4d storage calls, %3d Redis round trips  (%s)", mUsage.Calls, redisTrips[1], mUsage.ByKind)
		t.Logf("       collect: %4d storage calls, %3d Redis round trips  (%d manifests, layer links and blobs deleted; %s)", mCollect.Calls, redisTrips[2], len(rep.ManifestsDeleted)+len(rep.LayersUnlinked)+len(rep.BlobsDeleted), mCollect.ByKind)
		t.Logf("       usage: reclaimable %d B (%d blobs), exclusive %d B (%d blobs), %d shared of %d", u.ReclaimableBytes,
			u.ReclaimableBlobs, u.ExclusiveBytes, u.ExclusiveBlobs, u.SharedBlobs, u.Blobs)
		if i == 0 {
			first, firstRedis = [3]gctest.Measured{mDry, mUsage, mCollect}, redisTrips
			continue
		}
		for j, m := range []gctest.Measured{mDry, mUsage, mCollect} {
			if m.Calls != first[j].Calls || redisTrips[j] != firstRedis[j] {
				t.Errorf("R=%d: cost grew with the registry: %d calls, %d round trips; at R=10 %d, %d", R, m.Calls, redisTrips[j], first[j].Calls, firstRedis[j])
			}
		}
	}
}
