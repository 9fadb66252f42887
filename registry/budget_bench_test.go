package registry_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/linkdb"
	"github.com/reclaim-registry/reclaim/storage/storagetest/s3test"
)

// BenchmarkPullLatencyUnderGC measures what GC does to clients (issue 29,
// item 1): the latency of a steady pull load (4 clients pulling one
// 2-layer image, manifest and blobs, over HTTP, back to back) while the
// registry is idle, while the reclaimer deletes orphans, and while 20
// repositories are collected at once (20 concurrent collects, again and
// again: the first deletes each repository's untagged image, the next ones
// walk it), with GC's storage budget off (rate 0, in flight 0) and on
// (rate 200/s, 4 in flight: lower than what this GC uses unbounded, so
// the budget binds), on the filesystem and on S3 (versitygw; skipped
// without RECLAIM_TEST_VERSITYGW). One op is one image pull; it reports
// p50 and p99 in ms, and the GC work done meanwhile per second (blobs the
// reclaimer deleted, collects finished).
//
//	RECLAIM_TEST_REDIS_ADDR=127.0.0.1:6379 RECLAIM_TEST_VERSITYGW=$HOME/.cache/reclaim-ci/versitygw-v1.8.0 \
//	  go test ./registry -run '^$' -bench PullLatencyUnderGC -benchtime 2000x -count 2
//
// RECLAIM_BENCH_ORPHANS (default 20000, the figure) is how many
// orphans the reclaimer case queues: enough that it is still deleting
// when the pulls end (the reported deletes/s says so: otherwise it would
// read as idle). 2000 pulls put the p99 on 20 samples, not on 3.
func BenchmarkPullLatencyUnderGC(b *testing.B) {
	budgets := []struct {
		name           string
		rate, inflight int
	}{{"off", 0, 0}, {"on", 200, 4}}
	for _, backend := range []string{"fs", "s3"} {
		for _, bud := range budgets {
			for _, scenario := range []string{"idle", "reclaimer", "collect20"} {
				b.Run(fmt.Sprintf("%s/budget=%s/%s", backend, bud.name, scenario), func(b *testing.B) {
					r := startBench(b, backend, bud.rate, bud.inflight)
					benchPulls(b, r, scenario)
				})
			}
		}
	}
}

const benchWindow = time.Second

// startBench starts a registry with GC on, the reclaimer off (the case
// drives it), and the budget given, on backend.
func startBench(b *testing.B, backend string, rate, inflight int) *registrytest.Registry {
	var id [6]byte
	_, _ = rand.Read(id[:])
	opts := map[string]any{"window": benchWindow.String(), "dedup": "10ms", "gc": map[string]any{"enabled": true},
		"budget": map[string]any{"rate": rate, "inflight": inflight}}
	if addr := os.Getenv("RECLAIM_TEST_REDIS_ADDR"); addr != "" {
		opts["redis"] = map[string]any{"addrs": []any{addr}}
		opts["prefix"] = "bench-" + hex.EncodeToString(id[:]) + ":"
	}
	ro := []registrytest.Option{registrytest.WithStorageMiddleware("reclaim", opts)}
	if backend == "s3" {
		if os.Getenv("RECLAIM_TEST_VERSITYGW") == "" {
			b.Skip("RECLAIM_TEST_VERSITYGW not set")
		}
		s3 := s3test.StartS3(b)
		params := configuration.Parameters{}
		for k, v := range s3.Params(s3.Endpoint, "/bench-"+hex.EncodeToString(id[:])) {
			params[k] = v
		}
		ro = append(ro, registrytest.WithConfig(func(c *configuration.Configuration) {
			c.Storage["s3aws"] = params
			delete(c.Storage, "filesystem")
		}))
	}
	r := registrytest.Start(b, ro...)
	if err := linkdb.MarkLinkDBComplete(context.Background(), r.Server.Env().Raw, time.Now()); err != nil {
		b.Fatal(err)
	}
	return r
}

// benchPulls sets up scenario's GC work, runs it while b.N pulls are
// timed, and reports their p50 and p99.
func benchPulls(b *testing.B, r *registrytest.Registry, scenario string) {
	img := registrytest.PushImage(b, r, "bench/pull:v1", 2)
	paths := []string{"/v2/bench/pull/manifests/v1"}
	layers, _ := img.Layers()
	cfg, _ := img.ConfigName()
	for _, l := range layers {
		d, _ := l.Digest()
		paths = append(paths, "/v2/bench/pull/blobs/"+d.String())
	}
	paths = append(paths, "/v2/bench/pull/blobs/"+cfg.String())
	work := prepareGC(b, r, scenario)
	r.Age(b, benchWindow+200*time.Millisecond)

	ctx, stop := context.WithCancel(context.Background())
	var done atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); work(ctx, &done) }()
	lat := timePulls(b, r.URL, paths)
	elapsed := b.Elapsed()
	stop()
	wg.Wait()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	if scenario != "idle" {
		b.ReportMetric(float64(done.Load())/elapsed.Seconds(), "gc-work/s")
	}
}

// timePulls pulls paths (one image) b.N times from 4 clients.
func timePulls(b *testing.B, base string, paths []string) []time.Duration {
	const clients = 4
	lat := make([]time.Duration, b.N)
	var next atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	b.ResetTimer()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < int64(b.N); i = next.Add(1) - 1 {
				start := time.Now()
				for _, p := range paths {
					if err := get(base + p); err != nil {
						failed.Store(err)
						return
					}
				}
				lat[i] = time.Since(start)
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	return lat
}

func get(url string) error {
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Accept", "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %d", url, resp.StatusCode)
	}
	return nil
}

// prepareGC builds scenario's state and returns its work loop, which
// counts what it did into done until ctx ends.
func prepareGC(b *testing.B, r *registrytest.Registry, scenario string) func(ctx context.Context, done *atomic.Int64) {
	switch scenario {
	case "reclaimer":
		return prepareOrphans(b, r)
	case "collect20":
		return prepareCollects(b, r, 20)
	}
	return func(context.Context, *atomic.Int64) {}
}

func prepareOrphans(b *testing.B, r *registrytest.Registry) func(ctx context.Context, done *atomic.Int64) {
	n := 20000
	if s := os.Getenv("RECLAIM_BENCH_ORPHANS"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	ctx := context.Background()
	env := r.Server.Env()
	blobs := make([]digest.Digest, n)
	for i := range blobs {
		content := []byte(fmt.Sprintf("orphan %d %s", i, r.URL))
		blobs[i] = digest.FromBytes(content)
		if err := env.Raw.PutContent(ctx, layout.BlobDataPath(blobs[i]), content); err != nil {
			b.Fatal(err)
		}
	}
	if err := env.Queue().Enqueue(ctx, 0, blobs...); err != nil {
		b.Fatal(err)
	}
	rc, err := r.Server.NewReclaimer(true)
	if err != nil {
		b.Fatal(err)
	}
	return func(ctx context.Context, done *atomic.Int64) {
		for ctx.Err() == nil {
			rep := rc.Tick(ctx)
			for _, d := range rep.Decisions {
				if d.Deleted() {
					done.Add(1)
				}
			}
		}
	}
}

func prepareCollects(b *testing.B, r *registrytest.Registry, repos int) func(ctx context.Context, done *atomic.Int64) {
	for i := range repos {
		ref := fmt.Sprintf("bench/gc%02d:v1", i)
		registrytest.PushImage(b, r, ref, 2)
		registrytest.PushImage(b, r, ref, 2) // the first is untagged now
	}
	return func(ctx context.Context, done *atomic.Int64) {
		for ctx.Err() == nil {
			var wg sync.WaitGroup
			for i := range repos {
				wg.Add(1)
				go func() {
					defer wg.Done()
					url := fmt.Sprintf("%s/gc/v1/repositories/bench/gc%02d/collect", r.URL, i)
					req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
					if resp, err := http.DefaultClient.Do(req); err == nil {
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if resp.StatusCode == http.StatusOK {
							done.Add(1)
						}
					}
				}()
			}
			wg.Wait()
		}
	}
}
