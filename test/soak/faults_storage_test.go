package soak

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	storagemiddleware "github.com/distribution/distribution/v3/registry/storage/driver/middleware"

	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/storage/linkdb"
)

// faultRate is the fraction (in 1/1000) of writes and deletes the
// "soakfaults" storage middleware fails.
var faultRate atomic.Int64

var errInjected = errors.New("soak: injected storage fault")

var faultCounts counters

func init() {
	_ = storagemiddleware.Register("soakfaults", func(_ context.Context, d storagedriver.StorageDriver, _ map[string]any) (storagedriver.StorageDriver, error) {
		return &faultyDriver{StorageDriver: d}, nil
	})
}

// faultyDriver fails a fraction of PutContent, Move and Delete calls. It is
// listed below the reclaim middleware, so reverse-link writes and deletes
// fail too.
type faultyDriver struct {
	storagedriver.StorageDriver
}

func fault(op string) error {
	if rand.Int64N(1000) < faultRate.Load() {
		faultCounts.add(op, 1)
		return fmt.Errorf("%w: %s", errInjected, op)
	}
	return nil
}

func (d *faultyDriver) PutContent(ctx context.Context, path string, b []byte) error {
	if err := fault("put"); err != nil {
		return err
	}
	return d.StorageDriver.PutContent(ctx, path, b)
}

func (d *faultyDriver) Move(ctx context.Context, src, dst string) error {
	if err := fault("move"); err != nil {
		return err
	}
	return d.StorageDriver.Move(ctx, src, dst)
}

func (d *faultyDriver) Delete(ctx context.Context, path string) error {
	if err := fault("delete"); err != nil {
		return err
	}
	return d.StorageDriver.Delete(ctx, path)
}

// TestSoakStorageFaults runs the workload on two in-process registries (the
// fault driver lives in this test binary) whose storage fails 5% of writes
// and deletes. Pushes may fail; nothing referenced may be lost; verify must
// be clean or show only leaks; with the faults off, a re-run reclaims what
// the failed deletes left.
func TestSoakStorageFaults(t *testing.T) {
	t.Parallel() // mostly waiting out windows: the three soaks overlap
	if testing.Short() {
		t.Skip("soak skipped in -short mode")
	}
	addr, prefix, _ := soakRedis(t)
	c := newCluster(t, addr, prefix)
	for range 2 {
		c.regs = append(c.regs, registrytest.Start(t, registrytest.WithRootDirectory(c.root),
			registrytest.WithStorageMiddleware("soakfaults", nil), c.reclaim()))
	}
	ctx := context.Background()
	c.waitTrusted(ctx, t)
	w, err := newWorkload(c, 3)
	if err != nil {
		t.Fatal(err)
	}
	faultRate.Store(50)
	w.run(ctx, 10*time.Second, 3)
	faultRate.Store(0)
	t.Logf("injected faults:\n%s", faultCounts.String())

	judgeUnderFaults(ctx, t, c, w)
	repairAndRerun(ctx, t, c)
	verifyAll(ctx, t, c.regs[1], soakRepos, w)
	t.Logf("operations:\n%s\ncollections:\n%s", w.ops.String(), w.gcStats.String())
	if n := w.fails.sum(""); n > 0 {
		// pushes fail under storage faults by design; pulls must not
		for k, v := range w.fails.m {
			if !isPushFailure(k) {
				t.Errorf("data lost under storage faults: %s (%d)", k, v)
			}
		}
	}
}

// judgeUnderFaults verifies every image and the link database right after
// the faulty workload: nothing lost, and only leaks (and the known missing
// referrers-index entries) in the link database.
func judgeUnderFaults(ctx context.Context, t *testing.T, c *cluster, w *workload) {
	t.Helper()
	images, _ := verifyAll(ctx, t, c.regs[0], soakRepos, w)
	rep := linkdbVerify(ctx, t, c.raw)
	t.Logf("after 10s with 5%% failing writes and deletes: %d images verified; linkdb verify: %s", images, summarize(rep))
	if n := rep.Counts[linkdb.MissingReferrer]; n > 0 {
		// Known: when the referrers-index write fails after the referrer's
		// revision link was written, the PUT fails but the referrer stays
		// without its index entry. GC keeps referrers by parsing subjects,
		// so nothing is lost, and rebuild repairs it; the write order in
		// registry/referrers.go should still be fixed. Reported, not failed.
		t.Logf("FINDING: %d referrers-index entries missing after failed writes (rebuild repairs them)", n)
	}
	for _, k := range []linkdb.Kind{linkdb.MissingReverse, linkdb.Corrupt, linkdb.BrokenForward, linkdb.Unreadable} {
		if n := rep.Counts[k]; n > 0 {
			t.Errorf("linkdb verify shows more than leaks: %s=%d", k, n)
		}
	}
}

// repairAndRerun removes the leaks: stale reverse links (a forward write
// failed after its reverse link; a reverse-link delete failed after its
// forward link's). An online rebuild removes them under the GC fence; it
// does not queue the blobs it unlinks, so the sweep finds them. A final
// collect and reclaimer pass must then leave the link database clean.
func repairAndRerun(ctx context.Context, t *testing.T, c *cluster) {
	t.Helper()
	c.waitOutWindow(ctx, t)
	rb, err := linkdb.Rebuild(ctx, c.raw, linkdb.RebuildOptions{Fencer: linkdb.TrackerFencer(c.tracker, window, time.Minute), MinAge: -1, Workers: 2})
	if err != nil && !errors.Is(err, linkdb.ErrBroken) { // broken_forward is judged below, with verify's findings
		t.Fatalf("linkdb rebuild: %v", err)
	}
	t.Logf("linkdb rebuild removed %d stale reverse links (kept %d)", rb.StaleRemoved, rb.StaleKept)
	t.Logf("sweep: %s", sweepEnqueue(t, writeSweepConfig(t, c)))
	finalPass(ctx, t, c, soakRepos)
	after := linkdbVerify(ctx, t, c.raw)
	t.Logf("after the re-run without faults: %s", summarize(after))
	if after.ExitCode != linkdb.ExitClean {
		t.Errorf("linkdb verify after rebuild, sweep and re-run is not clean (exit %d)", after.ExitCode)
	}
	if n := after.Counts[linkdb.Reclaimable]; n > 0 {
		t.Errorf("the re-run left %d unreferenced blobs", n)
	}
}

// isPushFailure reports a push that failed because a storage write failed
// (a 500, or a 416 when an upload's state file was not written); a push
// refused as "blob unknown" would be lost data and is not excused.
func isPushFailure(k string) bool {
	return (strings.HasPrefix(k, "push ") || strings.HasPrefix(k, "mount+push")) && !strings.Contains(k, "BLOB_UNKNOWN")
}
