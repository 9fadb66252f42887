package soak

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/reclaim-registry/reclaim/linkdb"
	"github.com/reclaim-registry/reclaim/registry/registrytest"
)

// TestSoak: two `registry serve` processes on one filesystem root and one
// real Redis, the reclaimer on in both, clients and collectors hammering
// both; then everything that must survive is pulled and verified, the link
// database is verified, and after a final collect and reclaimer pass no
// unreferenced blob is left.
func TestSoak(t *testing.T) {
	t.Parallel() // mostly waiting out windows: the three soaks overlap
	addr := os.Getenv("RECLAIM_TEST_REDIS_ADDR")
	if addr == "" {
		t.Skip("TestSoak needs a real Redis: set RECLAIM_TEST_REDIS_ADDR=host:port (it uses a key prefix of its own)")
	}
	if testing.Short() {
		t.Skip("soak skipped in -short mode")
	}
	d := workloadDuration(t, 20*time.Second)
	prefix := randomPrefix()
	t.Cleanup(func() { cleanupRedis(addr, prefix) })
	root, raw := prepareStorage(t)
	c := &cluster{root: root, raw: raw, redisAddr: addr, prefix: prefix}
	for range 2 {
		p := registrytest.StartProcess(t,
			registrytest.WithRootDirectory(root),
			registrytest.WithHtpasswd("soak", "soak-password"),
			registrytest.WithStorageMiddleware("reclaim", middlewareOptions(addr, prefix)),
			quiet)
		c.procs = append(c.procs, p)
		c.regs = append(c.regs, p.Registry)
	}
	// GC trusts the tracker only after it recorded for a full window.
	time.Sleep(window + 500*time.Millisecond)

	w, err := newWorkload(c, 4)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	start := time.Now()
	w.run(ctx, d, 4)
	elapsed := time.Since(start)

	// Everything that must survive, with no workload running: every
	// failure now is lost data.
	images := verifyAll(ctx, t, c.regs[0], soakRepos)
	if images == 0 {
		t.Error("no tagged image survived the workload: nothing was verified")
	}
	rep := linkdbVerify(ctx, t, raw)
	t.Logf("linkdb verify after the workload: %s", summarize(rep))
	if rep.ExitCode != linkdb.ExitClean {
		t.Errorf("linkdb verify is not clean after the workload (exit %d)", rep.ExitCode)
	}
	blobsBefore := rep.Blobs

	finalPass(ctx, t, c, soakRepos)
	after := linkdbVerify(ctx, t, raw)
	t.Logf("linkdb verify after the final collect and reclaimer pass: %s", summarize(after))
	if after.ExitCode != linkdb.ExitClean {
		t.Errorf("linkdb verify is not clean after the final pass (exit %d)", after.ExitCode)
	}
	if n := after.Counts[linkdb.Reclaimable]; n > 0 {
		t.Errorf("%d unreferenced blobs older than W survived the final collect and reclaimer pass", n)
	}
	verifyAll(ctx, t, c.regs[1], soakRepos)

	var reviewed, deleted, freed int64
	for _, r := range c.regs {
		st, err := status(ctx, r)
		if err != nil {
			t.Errorf("status: %v", err)
			continue
		}
		reviewed += st.Reclaimer.Reviewed
		deleted += st.Reclaimer.Deleted
		freed += st.Reclaimer.BytesFreed
		t.Logf("reclaimer %s: reviewed=%d deleted=%d bytes=%d kept=%v deleted_by=%v failed_ticks=%d last_error=%q",
			r.URL, st.Reclaimer.Reviewed, st.Reclaimer.Deleted, st.Reclaimer.BytesFreed, st.Reclaimer.KeptBy,
			st.Reclaimer.DeletedBy, st.Reclaimer.FailedTicks, st.Reclaimer.LastError)
	}
	pushes := w.pushes.Load()
	refusals := w.refused.sum("")
	t.Logf("soak: %v workload, 2 processes, 4 clients; %d pushes, %d images verified at the end; blobs %d -> %d",
		elapsed.Round(time.Second), pushes, images, blobsBefore, after.Blobs)
	t.Logf("operations:\n%s", w.ops.String())
	t.Logf("retryable refusals (%d):\n%s", refusals, w.refused.String())
	t.Logf("collections:\n%s", w.gcStats.String())
	t.Logf("reclaimers: reviewed=%d deleted=%d bytes=%d; collect freed %d bytes",
		reviewed, deleted, freed, w.gcStats.get("collect bytes freed"))
	if n := w.fails.sum(""); n > 0 {
		t.Errorf("%d operations lost data or broke an image:\n%s", n, w.fails.String())
	}
	serverErrors := w.serverErrors.sum("")
	t.Logf("pushes failed with server errors (%d):\n%s", serverErrors, w.serverErrors.String())
	if serverErrors*100 > pushes {
		t.Errorf("more than 1%% of pushes failed with server errors: %d of %d", serverErrors, pushes)
	}
	if pushes > 0 && refusals*10 > pushes {
		t.Errorf("retryable refusals are not rare: %d for %d pushes", refusals, pushes)
	}
	if w.ops.sum("push image ok") == 0 || w.gcStats.get("collect 200") == 0 {
		t.Errorf("the workload did not exercise pushes and collections")
	}
}
