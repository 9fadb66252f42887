package reclaimer

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
	"github.com/opencontainers/go-digest"
	"github.com/redis/go-redis/v9"

	"github.com/reclaim-registry/reclaim/gc/collector"
	"github.com/reclaim-registry/reclaim/gc/internal/gctest"
	"github.com/reclaim-registry/reclaim/internal/config"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/linkdb"
	"github.com/reclaim-registry/reclaim/storage/middleware"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
	"github.com/reclaim-registry/reclaim/storage/storagetest/s3test"
)

// BenchmarkReclaimerDeletes measures the reclaimer's delete rate (issue
// 29, item 2): one op is one orphan blob (no repository links it, queued
// for review, due now, the tracker recording for longer than W) deleted
// by back-to-back ticks of a reclaimer wired as the registry wires it:
// the collector on the reclaim middleware's Env, fencing in Redis, the
// queue in Redis. It reports deletes/s, storage calls below the
// middleware per delete and Redis round trips per delete, on the
// filesystem and (with versitygw) on S3, with 1, 4 and 16 workers.
//
//	RECLAIM_TEST_REDIS_ADDR=127.0.0.1:6379 RECLAIM_TEST_VERSITYGW=$HOME/.cache/reclaim-ci/versitygw-v1.8.0 \
//	  go test ./gc/reclaimer -run '^$' -bench ReclaimerDeletes -benchtime 4000x
//
// Without RECLAIM_TEST_REDIS_ADDR it runs on miniredis (round trips are
// then counted, but the rate is not Redis's).
func BenchmarkReclaimerDeletes(b *testing.B) {
	backends := []struct {
		name string
		open func(b *testing.B) storagedriver.StorageDriver
	}{
		{"fs", func(b *testing.B) storagedriver.StorageDriver {
			return filesystem.New(filesystem.DriverParameters{RootDirectory: b.TempDir(), MaxThreads: 100})
		}},
		{"s3", func(b *testing.B) storagedriver.StorageDriver { return s3test.StartS3(b).Driver(b, "/bench") }},
	}
	for _, be := range backends {
		for _, workers := range []int{1, 4, 16} {
			b.Run(fmt.Sprintf("%s/workers=%d", be.name, workers), func(b *testing.B) {
				benchDeletes(b, be.open(b), workers)
			})
		}
	}
}

func benchDeletes(b *testing.B, below storagedriver.StorageDriver, workers int) {
	ctx := context.Background()
	addr, prefix := storagetest.RealOrMini(b)
	counting := storagetest.NewCountingDriver(below)
	env, err := middleware.NewEnv(ctx, counting, config.Options{Window: time.Hour, Prefix: prefix,
		Redis: redis.UniversalOptions{Addrs: storagetest.Addrs(addr)}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { env.Close() })
	client := env.Tracker.Client()
	// The tracker has recorded for longer than W: the reclaimer may delete
	// what nobody accessed (as TestReclaimerThroughput ages it).
	if err := client.Set(ctx, prefix+"since", strconv.FormatInt(time.Now().Add(-2*time.Hour).UnixMilli(), 10), 0).Err(); err != nil {
		b.Fatal(err)
	}
	c, err := collector.New(collector.Config{Driver: env.Driver, Tracker: env.Tracker, Links: env.Links, Clock: env.Tracker, Freed: env.Tracker,
		LinkDBComplete: func(ctx context.Context) (bool, error) {
			_, ok, err := linkdb.LinkDBComplete(ctx, env.Raw)
			return ok, err
		},
		Review: env.Queue(), Context: middleware.WithoutAccessRecords, Window: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	r, err := New(Config{Collector: c, Queue: env.Queue(), Driver: env.Driver, Context: middleware.WithoutAccessRecords,
		Freed: env.Tracker, Enabled: true, Interval: time.Millisecond, Workers: workers, UsageRefresh: -1, ScrubRepos: -1,
		Lease: time.Minute, Logf: b.Logf})
	if err != nil {
		b.Fatal(err)
	}
	blobs := make([]digest.Digest, b.N)
	for i := range blobs {
		content := []byte(fmt.Sprintf("orphan %d %s", i, prefix))
		blobs[i] = digest.FromBytes(content)
		if err := below.PutContent(ctx, layout.BlobDataPath(blobs[i]), content); err != nil {
			b.Fatal(err)
		}
	}
	if err := env.Queue().Enqueue(ctx, 0, blobs...); err != nil {
		b.Fatal(err)
	}
	counter := &storagetest.RedisCounter{}
	client.AddHook(counter)
	counting.Reset()
	deleted, ticks := 0, 0
	b.ResetTimer()
	for deleted < b.N {
		rep := r.Tick(ctx)
		ticks++
		if rep.Failed || len(rep.Decisions) == 0 {
			b.Fatalf("tick %d: %d of %d deleted: %v %s", ticks, deleted, b.N, rep.Err, rep.Abort)
		}
		for _, d := range rep.Decisions {
			if !d.Deleted() {
				b.Fatalf("%s kept: %s %s", d.Digest, d.Reason, d.Detail)
			}
			deleted++
		}
	}
	b.StopTimer()
	calls, _ := counting.Total()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "deletes/s")
	b.ReportMetric(float64(calls)/float64(b.N), "calls/delete")
	b.ReportMetric(float64(gctest.Steady(counter))/float64(b.N), "redis/delete")
	if b.N >= 1000 {
		b.Logf("%d deletes in %d ticks, %d workers: storage calls %v; Redis %v", b.N, ticks, workers, counting.Counts(), counter.Commands())
	}
	for _, d := range blobs[:min(len(blobs), 10)] {
		if _, err := below.Stat(ctx, layout.BlobDataPath(d)); err == nil {
			b.Fatalf("%s still there", d)
		}
	}
}
