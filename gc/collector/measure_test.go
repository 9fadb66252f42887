package collector

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/distribution/distribution/v3/registry/storage"
	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/distribution/distribution/v3/registry/storage/driver/inmemory"

	"github.com/reclaim-registry/reclaim/internal/config"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/linkdb"
	"github.com/reclaim-registry/reclaim/storage/middleware"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

type measured struct {
	calls   int
	entries int64 // yielded by walks
	stats   int64 // every Stat, the walks' own included
	names   int64 // returned by every List, the walks' own included
	byKind  string
	wall    time.Duration
}

func measure(c *storagetest.CountingDriver, w *storagetest.WalkCounter, run func()) measured {
	c.Reset()
	w.Reset()
	runtime.GC() // do not bill one measurement for the garbage of the previous
	start := time.Now()
	run()
	total, _ := c.Total()
	var kinds []string
	for k, n := range c.Counts() {
		kinds = append(kinds, fmt.Sprintf("%s=%d", k, n))
	}
	sort.Strings(kinds)
	return measured{calls: total, entries: w.Entries.Load(), stats: w.Stats.Load(), names: w.Names.Load(),
		byKind: strings.Join(kinds, " "), wall: time.Since(start)}
}

// measureRig is a registry of R filler repositories plus the target, on
// counting drivers, with a collector over the reclaim middleware.
type measureRig struct {
	ctx      context.Context
	w        *storagetest.WalkCounter
	counting *storagetest.CountingDriver
	c        *Collector
	env      *middleware.Env
}

func newMeasureRig(t testing.TB, R, M int) *measureRig {
	mem := inmemory.New()
	r := &measureRig{ctx: context.Background(), w: &storagetest.WalkCounter{StorageDriver: mem}}
	r.counting = storagetest.NewCountingDriver(r.w)
	f := &fixture{t: t, d: mem, tr: newFakeTracker()}
	build(f, R, M)
	// The reclaim middleware over the counting driver: deletes remove
	// reverse links (counted too). Access records come from the fake
	// tracker; the middleware's own Redis is an embedded one.
	env, err := middleware.NewEnv(r.ctx, r.counting, config.Options{Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.Close() })
	r.env = env
	r.c, err = New(Config{Driver: env.Driver, Tracker: f.tr, Links: env.Links, Context: middleware.WithoutAccessRecords,
		LinkDBComplete: func(context.Context) (bool, error) { return true, nil }, Window: time.Hour, Now: f.tr.clock})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *measureRig) collect(t testing.TB, dryRun bool) *Report {
	rep, err := r.c.Collect(r.ctx, "target/app", RunOptions{DryRun: dryRun})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// upstream runs `registry garbage-collect --dry-run --delete-untagged`
// (MarkAndSweep) on the same storage.
func (r *measureRig) upstream(t testing.TB) {
	ns, err := storage.NewRegistry(r.ctx, r.counting, storage.EnableDelete)
	if err != nil {
		t.Fatal(err)
	}
	devnull, _ := os.Open(os.DevNull)
	stdout := os.Stdout
	os.Stdout = devnull // MarkAndSweep prints every blob
	err = storage.MarkAndSweep(r.ctx, r.counting, ns, storage.GCOpts{DryRun: true, RemoveUntagged: true, Quiet: true})
	os.Stdout = stdout
	devnull.Close()
	if err != nil {
		t.Fatal(err)
	}
}

// TestMeasureCollectDoesNotGrowWithRegistry builds a registry of R
// repositories (3 manifests each, a shared base layer, an old base the
// target's untagged manifests share) plus one target repository with M
// manifests (half untagged), then counts the storage work of one collect
// of the target, next to upstream's MarkAndSweep dry run on the same data.
// Our calls, walked entries and Stats must be identical for every R.
//
//	go test ./gc -run TestMeasure -v                     (R = 10, 100)
//	RECLAIM_MEASURE=1 go test ./gc -run TestMeasure -v   (R = 10, 100, 1000)
func TestMeasureCollectDoesNotGrowWithRegistry(t *testing.T) {
	const M = 20
	sizes := []int{10, 100}
	if os.Getenv("RECLAIM_MEASURE") != "" {
		sizes = append(sizes, 1000)
	}
	var first [2]measured
	for i, R := range sizes {
		r := newMeasureRig(t, R, M)
		var dry, real *Report
		mDry := measure(r.counting, r.w, func() { dry = r.collect(t, true) })
		upstream := measure(r.counting, r.w, func() { r.upstream(t) })
		mReal := measure(r.counting, r.w, func() { real = r.collect(t, false) })
		if len(dry.ManifestsDeleted) != M/2 || len(real.ManifestsDeleted) != M/2 || len(real.BlobsDeleted) != 3*M/2 {
			t.Fatalf("R=%d: deleted %d/%d manifests and %d blobs, want %d and %d: %s", R, len(dry.ManifestsDeleted),
				len(real.ManifestsDeleted), len(real.BlobsDeleted), M/2, 3*M/2, summary(real))
		}
		t.Logf("R=%4d M=%d (%d manifests, %d links, %d blobs deleted)", R, M, len(real.ManifestsDeleted), len(real.LayersUnlinked), len(real.BlobsDeleted))
		for _, m := range []struct {
			name string
			m    measured
		}{{"reclaim dry-run", mDry}, {"reclaim collect", mReal}, {"upstream MarkAndSweep dry-run", upstream}} {
			t.Logf("         %-30s %6d calls %6d walked %6d stats %7d names listed %8s", m.name, m.m.calls, m.m.entries, m.m.stats, m.m.names, m.m.wall.Round(time.Millisecond))
		}
		t.Logf("         reclaim collect by method: %s", mReal.byKind)
		t.Logf("         upstream by method:        %s", upstream.byKind)
		if i == 0 {
			first = [2]measured{mDry, mReal}
			continue
		}
		for j, m := range []measured{mDry, mReal} {
			if f := first[j]; m.calls != f.calls || m.entries != f.entries || m.stats != f.stats {
				t.Errorf("R=%d: collect cost grew with the registry: %d calls, %d walked, %d stats; at R=%d %d, %d, %d",
					R, m.calls, m.entries, m.stats, sizes[0], f.calls, f.entries, f.stats)
			}
		}
	}
}

// BenchmarkCollectDryRun times a dry-run collect of the target repository
// next to upstream's MarkAndSweep dry run, on the same registry of R
// repositories, and reports the storage work per run below the driver API:
//
//	go test ./gc -run XXX -bench CollectDryRun -benchtime 20x
func BenchmarkCollectDryRun(b *testing.B) {
	for _, R := range []int{10, 100, 1000} {
		r := newMeasureRig(b, R, 20)
		for _, who := range []string{"reclaim", "upstream"} {
			b.Run(fmt.Sprintf("R=%d/%s", R, who), func(b *testing.B) {
				run := func() { r.collect(b, true) }
				if who == "upstream" {
					run = func() { r.upstream(b) }
				}
				for b.Loop() {
					run()
				}
				m := measure(r.counting, r.w, run)
				b.ReportMetric(float64(m.calls), "calls/op")
				b.ReportMetric(float64(m.stats), "stats/op")
				b.ReportMetric(float64(m.names), "listed/op")
			})
		}
	}
}

// build writes R filler repositories and the target, with reverse links,
// as the middleware would have. Every repository shares a base layer; the
// target's untagged manifests also share an old base with every filler, so
// the collect unlinks a layer that R other repositories link and must ask
// whether anybody else does.
func build(f *fixture, R, M int) {
	base, oldBase := "shared-base-layer", "shared-old-base-layer"
	for r := range R {
		repo := fmt.Sprintf("filler/r%04d", r)
		for m := range 3 {
			img := f.image(repo, nil, base, oldBase, fmt.Sprintf("%s-%d", repo, m))
			if m < 2 {
				f.tag(repo, fmt.Sprint("v", m), img.Digest)
			}
		}
	}
	for m := range M {
		layers := []string{base, fmt.Sprintf("target-%d", m)}
		if m%2 == 1 {
			layers = append(layers, oldBase)
		}
		img := f.image("target/app", nil, layers...)
		if m%2 == 0 {
			f.tag("target/app", fmt.Sprint("v", m), img.Digest)
		}
	}
	writeReverseLinks(f)
}

// writeReverseLinks writes a reverse link for every forward link in f's
// storage, as the middleware would have.
func writeReverseLinks(f *fixture) {
	ctx := context.Background()
	links := linkdb.NewReverseLinks(f.d)
	err := f.d.Walk(ctx, layout.RepositoriesRoot, func(fi storagedriver.FileInfo) error {
		p := layout.Classify(fi.Path())
		switch p.Kind {
		case layout.PathLayerLink:
			return links.Put(ctx, p.Digest, reclaim.RepoLink{Repo: p.Repo, Kind: reclaim.LinkLayer})
		case layout.PathRevisionLink:
			return links.Put(ctx, p.Digest, reclaim.RepoLink{Repo: p.Repo, Kind: reclaim.LinkManifest})
		}
		return nil
	})
	if err != nil {
		f.t.Fatal(err)
	}
}
