package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/internal/config"
	"github.com/reclaim-registry/reclaim/registry/gcapi"
	"github.com/reclaim-registry/reclaim/retention"
	"github.com/reclaim-registry/reclaim/retention/inuse"
	"github.com/reclaim-registry/reclaim/retention/redisstore"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/middleware"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

// Measures retention on one repository of n tags, each its own manifest,
// written straight to an in-memory driver below the reclaim middleware,
// with the embedded Redis: the calls a plan makes to storage (counted
// below the middleware) and to Redis (round trips), and the time of a
// plan and of an apply with every fresh-state check.
//
//	go test ./registry -run XXX -bench Retention -benchtime 5x

type retentionFixture struct {
	env      *middleware.Env
	drv      *storagetest.CountingDriver
	redis    *storagetest.RedisCounter
	backend  *gcapi.Retention
	policy   retention.Policy
	versions []digest.Digest
}

func newRetentionFixture(b *testing.B, n int) *retentionFixture {
	ctx := context.Background()
	drv := storagetest.NewCountingDriver(inmemory.New())
	env, err := middleware.NewEnv(ctx, drv, config.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { env.Close() })
	f := &retentionFixture{env: env, drv: drv, redis: &storagetest.RedisCounter{}}
	env.Tracker.Client().AddHook(f.redis)
	opts, _ := config.Options{Retention: config.Retention{PlanKeep: 30 * 24 * time.Hour}}.WithDefaults()
	pins := redisstore.NewPins(env.Tracker.Client(), opts.Prefix, nil)
	index := redisstore.NewInUse(env.Tracker.Client(), opts.Prefix)
	f.backend = newRetention(env, opts, pins, index, nil, "", nil)
	f.policy = retention.Policy{KeepNewest: 10, RollbackSlack: 3, MinAge: 1, Cap: n}
	f.write(b, "bench/app", n)
	// in use: the middle version (and one of another repository)
	mid := f.versions[n/2]
	if _, err := index.Put(ctx, "prod", []inuse.Image{{Repository: "bench/app", Digest: mid}, {Repository: "x/y", Digest: mid}}, time.Now()); err != nil {
		b.Fatal(err)
	}
	return f
}

// write stores n tags v0000.. of repo, each on its own small manifest.
func (f *retentionFixture) write(b *testing.B, repo string, n int) {
	ctx := context.Background()
	f.versions = make([]digest.Digest, n)
	for i := range n {
		m, _ := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json", "annotations": map[string]string{"i": fmt.Sprint(i)}})
		d := digest.FromBytes(m)
		f.versions[i] = d
		tag := fmt.Sprintf("v%04d", i)
		for p, c := range map[string][]byte{
			layout.BlobDataPath(d): m, layout.RevisionLinkPath(repo, d): []byte(d), layout.TagCurrentPath(repo, tag): []byte(d),
			layout.TagIndexPath(repo, tag, d): []byte(d),
		} {
			if err := f.env.Raw.PutContent(ctx, p, c); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func BenchmarkRetentionPlan1000(b *testing.B) {
	f := newRetentionFixture(b, 1000)
	ctx := context.Background()
	var plan *retention.Plan
	f.drv.Reset()
	f.redis.Reset()
	b.ResetTimer()
	for range b.N {
		var err error
		if plan, err = f.backend.Planner.Plan(ctx, "bench/app", f.policy, retention.PolicyOverride{}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	total, _ := f.drv.Total()
	b.ReportMetric(float64(total)/float64(b.N), "storage-calls/op")
	b.ReportMetric(float64(f.redis.Count())/float64(b.N), "redis-roundtrips/op")
	b.ReportMetric(float64(len(plan.Candidates)), "candidates")
	size, _ := json.Marshal(plan)
	b.Logf("per plan: storage %v, redis %v (N=%d); stored plan %d bytes", f.drv.Counts(), f.redis.Commands(), b.N, len(size))
}

func BenchmarkRetentionApply(b *testing.B) {
	ctx := context.Background()
	var deleted int
	var took time.Duration
	var calls, rts int
	for range b.N {
		b.StopTimer()
		f := newRetentionFixture(b, 1000)
		plan, err := f.backend.Planner.Plan(ctx, "bench/app", f.policy, retention.PolicyOverride{})
		if err != nil {
			b.Fatal(err)
		}
		f.drv.Reset()
		f.redis.Reset()
		b.StartTimer()
		start := time.Now()
		rep := f.backend.Applier.Apply(ctx, plan, retention.ApplyOptions{})
		took += time.Since(start)
		if rep.Aborted != nil || len(rep.Skipped) != 0 {
			b.Fatalf("apply: %+v", rep)
		}
		deleted += len(rep.Deleted)
		t, _ := f.drv.Total()
		calls += t
		rts += int(f.redis.Count())
	}
	b.ReportMetric(float64(deleted)/took.Seconds(), "tags/s")
	b.ReportMetric(float64(calls)/float64(deleted), "storage-calls/tag")
	b.ReportMetric(float64(rts)/float64(deleted), "redis-roundtrips/tag")
}
