package linkdb

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/distribution/distribution/v3/registry/storage/driver/filesystem"

	"github.com/reclaim-registry/reclaim/storage/linkdb/internal/gen"
)

// BenchmarkRebuild measures `linkdb rebuild` on generated registries shaped
// like the one in docs/operations.md (per repository 10 manifests of 9
// layers, 3 of them from a pool every repository shares, every 5th manifest
// with a referrer: 75 forward links). It reports forward links per second of
// the whole rebuild (links/s) and of its repositories phase (repo-links/s),
// and the peak Go heap while it ran (peak-heap-MB).
//
//	go test -run '^$' -bench Rebuild -benchtime 1x ./storage/linkdb
//
// fresh: nothing but forward links there yet (every reverse link and
// referrers entry to write); again: a rebuilt registry (nothing to write).
// Environment:
//
//	RECLAIM_BENCH_REBUILD_REPOS   repository counts, default 140 (10,500 links); 1400 is 105,000
//	RECLAIM_BENCH_REBUILD_DRIVER  fs (default) or s3 (versitygw, see s3_test.go)
//	RECLAIM_BENCH_REBUILD_DIR     keep generated registries here and reuse them across runs
//	RECLAIM_BENCH_REBUILD_WORKERS RebuildOptions.Workers, default 8
//	RECLAIM_BENCH_REBUILD_SYNC    on fs: barrier (default: FilesystemRoot set,
//	                              one syncfs per checkpoint and before the
//	                              marker) or each (through the driver, two
//	                              fsyncs per link, as before FilesystemRoot)
func BenchmarkRebuild(b *testing.B) {
	driver := envOr("RECLAIM_BENCH_REBUILD_DRIVER", "fs")
	barrier := envOr("RECLAIM_BENCH_REBUILD_SYNC", "barrier") == "barrier"
	workers, err := strconv.Atoi(envOr("RECLAIM_BENCH_REBUILD_WORKERS", "8"))
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range strings.Split(envOr("RECLAIM_BENCH_REBUILD_REPOS", "140"), ",") {
		repos, err := strconv.Atoi(strings.TrimSpace(n))
		if err != nil {
			b.Fatal(err)
		}
		spec := gen.Spec{Repos: repos, Images: 10, LayersPerImage: 9, SharedLayers: 3, ReferrerEvery: 5, Seed: "bench"}
		b.Run(fmt.Sprintf("%s/repos=%d", driver, repos), func(b *testing.B) {
			tmpl := benchTemplate(b, driver, spec)
			opts := func(root string) RebuildOptions {
				o := RebuildOptions{Workers: workers}
				if barrier {
					o.FilesystemRoot = root
				}
				return o
			}
			b.Run("fresh", func(b *testing.B) {
				for range b.N {
					b.StopTimer()
					d, root := benchCopy(b, driver, tmpl)
					b.StartTimer()
					benchRebuild(b, d, opts(root))
				}
			})
			b.Run("again", func(b *testing.B) {
				b.StopTimer()
				d, root := benchCopy(b, driver, tmpl)
				opts := opts(root)
				if _, err := Rebuild(context.Background(), d, opts); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				for range b.N {
					benchRebuild(b, d, opts)
				}
			})
		})
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// benchRebuild runs one rebuild and reports its rates and peak heap (of the
// last run, when b.N > 1).
func benchRebuild(b *testing.B, d storagedriver.StorageDriver, opts RebuildOptions) {
	runtime.GC()
	peak := sampleHeap()
	cpu := cpuTime()
	res, err := Rebuild(context.Background(), d, opts)
	cpu = cpuTime() - cpu
	heap := peak()
	if err != nil || !res.Complete {
		b.Fatalf("rebuild: complete %v, %v", res != nil && res.Complete, err)
	}
	links := float64(res.ForwardLinks)
	b.ReportMetric(links/res.Duration.Seconds(), "links/s")
	b.ReportMetric(links/res.RepositoriesPhase.Seconds(), "repo-links/s")
	b.ReportMetric(float64(res.ReverseLinks)/res.BlobsPhase.Seconds(), "blob-links/s")
	b.ReportMetric(float64(heap)/(1<<20), "peak-heap-MB")
	b.ReportMetric(links, "fwd-links")
	// On a shared machine the wall rate says as much about the neighbours;
	// the CPU this process spent per link does not.
	b.ReportMetric(cpu.Seconds()*1e6/links, "cpu-µs/link")
}

// cpuTime is the user and system CPU time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// sampleHeap samples the bytes of heap objects (live or not yet collected)
// every millisecond until the returned func is called, which returns the
// largest sample.
func sampleHeap() (stop func() uint64) {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	var (
		mu   sync.Mutex
		peak uint64
	)
	read := func() {
		metrics.Read(s)
		mu.Lock()
		peak = max(peak, s[0].Value.Uint64())
		mu.Unlock()
	}
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				read()
			}
		}
	}()
	return func() uint64 {
		close(done)
		<-exited
		read()
		return peak
	}
}

// benchTemplate returns the directory holding the generated registry of
// spec (on S3: the gateway's root), generating it unless
// RECLAIM_BENCH_REBUILD_DIR has it from an earlier run.
func benchTemplate(b *testing.B, driver string, spec gen.Spec) string {
	b.Helper()
	base := os.Getenv("RECLAIM_BENCH_REBUILD_DIR")
	if base == "" {
		base = b.TempDir()
	}
	dir := filepath.Join(base, fmt.Sprintf("%s-%d-%d-%d-%d-%d", driver, spec.Repos, spec.Images, spec.LayersPerImage, spec.SharedLayers, spec.ReferrerEvery))
	stamp := dir + ".done"
	if fileExists(stamp) {
		return dir
	}
	if err := os.RemoveAll(dir); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	var d storagedriver.StorageDriver
	if driver == "s3" {
		d = versitygwAt(b, dir)
	} else {
		d = filesystem.New(filesystem.DriverParameters{RootDirectory: dir, MaxThreads: 100})
	}
	st := generate(b, d, spec)
	b.Logf("generated %d forward links, %d blobs in %s", st.Links(), st.Blobs, time.Since(start).Round(time.Second))
	if err := os.WriteFile(stamp, nil, 0o644); err != nil {
		b.Fatal(err)
	}
	return dir
}

// benchCopy copies template tmpl (cp -a keeps versitygw's xattrs) and
// returns a driver on the copy, and on fs its root directory.
func benchCopy(b *testing.B, driver, tmpl string) (d storagedriver.StorageDriver, root string) {
	b.Helper()
	dir := filepath.Join(b.TempDir(), "registry")
	if out, err := exec.Command("cp", "-a", tmpl, dir).CombinedOutput(); err != nil {
		b.Fatalf("copy %s: %v: %s", tmpl, err, out)
	}
	if driver == "s3" {
		return versitygwAt(b, dir), ""
	}
	// The copy's pages are dirty: write them out now, or the first
	// barrier would pay for them.
	syscall.Sync()
	return filesystem.New(filesystem.DriverParameters{RootDirectory: dir, MaxThreads: 100}), dir
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }
