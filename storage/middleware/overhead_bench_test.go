package middleware

import (
	"context"
	"crypto/rand"
	"fmt"
	"sort"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

// BenchmarkOverhead measures the wall time the middleware adds to a push or
// a pull, in a way that stays meaningful on a small, shared machine.
//
// Two apps run side by side in this process, the same Distribution on the
// filesystem driver with the inmemory blob descriptor cache, one without
// and one with the middleware (real redis-server when
// RECLAIM_TEST_REDIS_ADDR is set, else the embedded miniredis). Each of the
// b.N iterations is one pair: the same work (the same image) on both apps,
// back to back, the order alternating from pair to pair (A/B, B/A, ...).
// Load from elsewhere falls on both halves of a pair alike, so the pair's
// ratio is the measurement; the benchmark reports the median of the pairs'
// overheads and their spread:
//
//	%overhead  median over pairs of (with - without) / without, in percent
//	%q1, %q3   first and third quartiles of the same (spread: q3 - q1)
//	ms-without, ms-with  median wall time of one operation
//	calls/op, calls+/op  driver calls per operation with the middleware,
//	           and how many more than without it
//	redis/op   Redis round trips per operation (commands and pipelines)
//	cpu-*      the same for the CPU time this process used (registry,
//	           client and middleware; not redis-server): much steadier
//	           than wall time when other processes compete for the cores
//
// The counts are exact and do not depend on load; the times need enough
// pairs (100 or more) for the median to settle:
//
//	RECLAIM_TEST_REDIS_ADDR=127.0.0.1:6379 go test -run XXX -bench Overhead -benchtime 150x ./storage
//
// Images are held in memory, uncompressed random bytes (staticImage), so
// the client adds no gzip work to the process's CPU time. Cases: push of a
// fresh 5-layer image (4 KiB and 1 MiB layers: every
// blob uploaded, every link written); repush of one image under a new tag
// again and again (every blob is there: HEADs, and a manifest PUT that
// writes its revision link again); pull of the same 5-layer image again
// and again (the steady state of a hot image: the per-process dedup spares
// most Redis writes); pull-cold, every pull a different image (each blob's
// access goes to Redis); push with 1 ms added to every storage call
// (latency=1ms: a remote store's requests, each waited for).
func BenchmarkOverhead(b *testing.B) {
	for _, tc := range []overheadCase{
		{op: "push", layer: 4 << 10, batch: 2},
		{op: "push", layer: 1 << 20, batch: 1},
		{op: "repush", layer: 4 << 10, batch: 4},
		{op: "pull", layer: 4 << 10, batch: 4},
		{op: "pull-cold", layer: 4 << 10, batch: 2},
		{op: "push", layer: 4 << 10, batch: 1, latency: time.Millisecond},
		// a remote store inside a region (issue 29 item 4): 5 and 20 ms
		{op: "push", layer: 4 << 10, batch: 1, latency: 5 * time.Millisecond},
		{op: "push", layer: 1 << 20, batch: 1, latency: 5 * time.Millisecond},
		{op: "pull-cold", layer: 4 << 10, batch: 1, latency: 5 * time.Millisecond},
		{op: "push", layer: 4 << 10, batch: 1, latency: 20 * time.Millisecond},
		{op: "push", layer: 1 << 20, batch: 1, latency: 20 * time.Millisecond},
		{op: "pull-cold", layer: 4 << 10, batch: 1, latency: 20 * time.Millisecond},
	} {
		name := fmt.Sprintf("%s/layer=%dKiB", tc.op, tc.layer>>10)
		if tc.latency > 0 {
			name = fmt.Sprintf("%s/latency=%v", name, tc.latency)
		}
		b.Run(name, func(b *testing.B) { tc.run(b) })
	}
}

// overheadCase is one operation timed on both apps; batch operations make
// one half of a pair, so that one half lasts a few tens of milliseconds.
type overheadCase struct {
	op    string // "push", "repush", "pull", "pull-cold"
	layer int64
	batch int
	// latency is added to every storage call of both apps (below the
	// middleware): a remote store, where a call waits rather than
	// computes, so what the middleware overlaps shows even on busy cores
	latency time.Duration
}

func (tc overheadCase) run(b *testing.B) {
	apps := [2]*testApp{benchApp(b, false), benchApp(b, true)}
	if tc.latency > 0 {
		testHook.Set(b, func(context.Context, string, string) error {
			time.Sleep(tc.latency) // simulated storage latency, not an interleaving
			return nil
		})
	}
	work := tc.work(b, apps)
	// warm-up: connections dialed, scripts loaded, caches filled
	for _, f := range tc.batchOf(work, -1) {
		f(apps[0])
		f(apps[1])
	}
	ratios, cpuRatios := make([]float64, 0, b.N), make([]float64, 0, b.N)
	var d, cpu [2][]time.Duration
	var calls [2]int
	var redis int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ops := tc.batchOf(work, i)
		for k := 0; k < 2; k++ {
			j := (i + k) % 2 // alternate which app goes first
			a := apps[j]
			a.reset() // count the timed operations only
			start, cpuStart := time.Now(), cpuTime()
			for _, f := range ops {
				f(a)
			}
			d[j] = append(d[j], time.Since(start)/time.Duration(tc.batch))
			cpu[j] = append(cpu[j], (cpuTime()-cpuStart)/time.Duration(tc.batch))
			n, _ := a.count.Total()
			calls[j] += n
			if a.rc != nil {
				redis += a.rc.Count()
			}
		}
		ratios = append(ratios, float64(d[1][i])/float64(d[0][i])-1)
		cpuRatios = append(cpuRatios, float64(cpu[1][i])/float64(cpu[0][i])-1)
	}
	b.StopTimer()
	ops := float64(b.N * tc.batch)
	b.ReportMetric(float64(calls[1])/ops, "calls/op")
	b.ReportMetric(float64(calls[1]-calls[0])/ops, "calls+/op")
	b.ReportMetric(float64(redis)/ops, "redis/op")
	reportOverhead(b, "", ratios, d)
	reportOverhead(b, "cpu-", cpuRatios, cpu)
}

// work returns the operation of pair i, element k of its batch, after
// the setup the case needs on both apps.
func (tc overheadCase) work(b *testing.B, apps [2]*testApp) func(i, k int) func(a *testApp) {
	newImg := func() v1.Image { return staticImage(b, tc.layer, 5) }
	var work func(i, k int) func(a *testApp)
	switch tc.op {
	case "push":
		work = func(i, k int) func(a *testApp) {
			img, ref := newImg(), fmt.Sprintf("bench:v%d-%d", i, k)
			return func(a *testApp) {
				if err := a.push(ref, img); err != nil {
					b.Fatal(err)
				}
			}
		}
	case "repush":
		img := newImg()
		tc.pushBoth(b, apps, "bench:repush", img)
		work = func(i, k int) func(a *testApp) {
			ref := fmt.Sprintf("bench:re%d-%d", i, k)
			return func(a *testApp) {
				if err := a.push(ref, img); err != nil {
					b.Fatal(err)
				}
			}
		}
	case "pull":
		tc.pushBoth(b, apps, "bench:pull", newImg())
		work = func(int, int) func(a *testApp) { return func(a *testApp) { a.pullAll("bench:pull") } }
	case "pull-cold":
		// set up outside the timed halves: a fresh image on both apps
		work = func(i, k int) func(a *testApp) {
			ref := fmt.Sprintf("bench:cold%d-%d", i, k)
			tc.pushBoth(b, apps, ref, newImg())
			return func(a *testApp) { a.pullAll(ref) }
		}
	}
	return work
}

// cpuTime is the CPU time (user and system) this process has used: the
// registry, the client and the middleware, not the redis-server.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func (tc overheadCase) batchOf(work func(i, k int) func(a *testApp), i int) []func(a *testApp) {
	ops := make([]func(a *testApp), tc.batch)
	for k := range ops {
		ops[k] = work(i, k)
	}
	return ops
}

func (tc overheadCase) pushBoth(b *testing.B, apps [2]*testApp, ref string, img v1.Image) {
	for _, a := range apps {
		if err := a.push(ref, img); err != nil {
			b.Fatal(err)
		}
	}
}

// reportOverhead reports the median overhead of the pairs, its quartiles,
// and the median time of one operation on each app.
func reportOverhead(b *testing.B, prefix string, ratios []float64, d [2][]time.Duration) {
	sort.Float64s(ratios)
	b.ReportMetric(100*quantile(ratios, 0.5), prefix+"%overhead")
	b.ReportMetric(100*quantile(ratios, 0.25), prefix+"%q1")
	b.ReportMetric(100*quantile(ratios, 0.75), prefix+"%q3")
	b.ReportMetric(float64(median(d[0]).Microseconds())/1000, prefix+"ms-without")
	b.ReportMetric(float64(median(d[1]).Microseconds())/1000, prefix+"ms-with")
}

// staticImage is an image of n layers of size random bytes, held in
// memory: pushing it costs the client no compression, so the process's CPU
// time is the registry's (random.Image gzips every layer on every push).
func staticImage(b testing.TB, size int64, n int) v1.Image {
	layers := make([]v1.Layer, n)
	for i := range layers {
		buf := make([]byte, size)
		_, _ = rand.Read(buf)
		layers[i] = static.NewLayer(buf, types.OCILayer)
	}
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		b.Fatal(err)
	}
	return img
}

// quantile of sorted s, linear between neighbours.
func quantile(s []float64, q float64) float64 {
	if len(s) == 0 {
		return 0
	}
	x := q * float64(len(s)-1)
	i := int(x)
	if i+1 >= len(s) {
		return s[len(s)-1]
	}
	return s[i] + (x-float64(i))*(s[i+1]-s[i])
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func benchApp(b *testing.B, reclaim bool) *testApp {
	o := appOptions{noReclaim: !reclaim, cache: "inmemory"}
	if addr := storagetest.RealRedis(); addr != "" {
		o.redisAddr, o.prefix = addr, storagetest.RealPrefix(b, addr)
	}
	return newTestApp(b, o)
}
