package collector

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/distribution/distribution/v3/registry/storage"

	"github.com/reclaim-registry/reclaim/gc/internal/gctest"
	"github.com/reclaim-registry/reclaim/storage/middleware"
)

// measureRig is gctest's rig with a collector over the reclaim
// middleware.
type measureRig struct {
	*gctest.MeasureRig
	c *Collector
}

func newMeasureRig(t testing.TB, R, M int) *measureRig {
	r := &measureRig{MeasureRig: gctest.NewMeasureRig(t, R, M)}
	var err error
	r.c, err = New(Config{Driver: r.Env.Driver, Tracker: fakeTracker{r.Tracker}, Links: r.Env.Links, Context: middleware.WithoutAccessRecords,
		LinkDBComplete: func(context.Context) (bool, error) { return true, nil }, Window: time.Hour, Now: r.Tracker.Clock})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *measureRig) collect(t testing.TB, dryRun bool) *Report {
	rep, err := r.c.Collect(r.Ctx, "target/app", RunOptions{DryRun: dryRun})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// upstream runs `registry garbage-collect --dry-run --delete-untagged`
// (MarkAndSweep) on the same storage.
func (r *measureRig) upstream(t testing.TB) {
	ns, err := storage.NewRegistry(r.Ctx, r.Counting, storage.EnableDelete)
	if err != nil {
		t.Fatal(err)
	}
	devnull, _ := os.Open(os.DevNull)
	stdout := os.Stdout
	os.Stdout = devnull // MarkAndSweep prints every blob
	err = storage.MarkAndSweep(r.Ctx, r.Counting, ns, storage.GCOpts{DryRun: true, RemoveUntagged: true, Quiet: true})
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
//	go test ./gc/collector -run TestMeasure -v                     (R = 10, 100)
//	RECLAIM_MEASURE=1 go test ./gc/collector -run TestMeasure -v   (R = 10, 100, 1000)
func TestMeasureCollectDoesNotGrowWithRegistry(t *testing.T) {
	const M = 20
	sizes := []int{10, 100}
	if os.Getenv("RECLAIM_MEASURE") != "" {
		sizes = append(sizes, 1000)
	}
	var first [2]gctest.Measured
	for i, R := range sizes {
		r := newMeasureRig(t, R, M)
		var dry, real *Report
		mDry := gctest.Measure(r.Counting, r.W, func() { dry = r.collect(t, true) })
		upstream := gctest.Measure(r.Counting, r.W, func() { r.upstream(t) })
		mReal := gctest.Measure(r.Counting, r.W, func() { real = r.collect(t, false) })
		if len(dry.ManifestsDeleted) != M/2 || len(real.ManifestsDeleted) != M/2 || len(real.BlobsDeleted) != 3*M/2 {
			t.Fatalf("R=%d: deleted %d/%d manifests and %d blobs, want %d and %d: %s", R, len(dry.ManifestsDeleted),
				len(real.ManifestsDeleted), len(real.BlobsDeleted), M/2, 3*M/2, summary(real))
		}
		t.Logf("R=%4d M=%d (%d manifests, %d links, %d blobs deleted)", R, M, len(real.ManifestsDeleted), len(real.LayersUnlinked), len(real.BlobsDeleted))
		for _, m := range []struct {
			name string
			m    gctest.Measured
		}{{"reclaim dry-run", mDry}, {"reclaim collect", mReal}, {"upstream MarkAndSweep dry-run", upstream}} {
			t.Logf("         %-30s %6d calls %6d walked %6d stats %7d names listed %8s", m.name, m.m.Calls, m.m.Entries, m.m.Stats, m.m.Names, m.m.Wall.Round(time.Millisecond))
		}
		t.Logf("         reclaim collect by method: %s", mReal.ByKind)
		t.Logf("         upstream by method:        %s", upstream.ByKind)
		if i == 0 {
			first = [2]gctest.Measured{mDry, mReal}
			continue
		}
		for j, m := range []gctest.Measured{mDry, mReal} {
			if f := first[j]; m.Calls != f.Calls || m.Entries != f.Entries || m.Stats != f.Stats {
				t.Errorf("R=%d: collect cost grew with the registry: %d calls, %d walked, %d stats; at R=%d %d, %d, %d",
					R, m.Calls, m.Entries, m.Stats, sizes[0], f.Calls, f.Entries, f.Stats)
			}
		}
	}
}

// BenchmarkCollectDryRun times a dry-run collect of the target repository
// next to upstream's MarkAndSweep dry run, on the same registry of R
// repositories, and reports the storage work per run below the driver API:
//
//	go test ./gc/collector -run XXX -bench CollectDryRun -benchtime 20x
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
				m := gctest.Measure(r.Counting, r.W, run)
				b.ReportMetric(float64(m.Calls), "calls/op")
				b.ReportMetric(float64(m.Stats), "stats/op")
				b.ReportMetric(float64(m.Names), "listed/op")
			})
		}
	}
}
