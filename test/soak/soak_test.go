package soak

import (
	"context"
	"testing"
	"time"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/redis/go-redis/v9"

	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/storage/linkdb"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

// TestSoak: two `registry serve` processes on one filesystem root and one
// real Redis, the reclaimer on in both, clients, racers and collectors
// hammering both; then everything that must survive is pulled and verified,
// the link database is verified, and after a final collect and reclaimer
// pass no unreferenced blob is left. It runs once per blob descriptor cache
// kind (subtests cache=inmemory and cache=redis, in parallel; both instances
// of a subtest use the same kind, as a deployment does). The inmemory run
// has the trash on (trash.keep 1h): its deletions are holds, and judgeTrash
// checks them.
func TestSoak(t *testing.T) {
	t.Parallel() // mostly waiting out windows: the soaks overlap
	addr := storagetest.RealRedis()
	if addr == "" {
		t.Skipf("TestSoak needs a real Redis: set %s=host:port (it uses a key prefix of its own)", storagetest.RedisAddrEnv)
	}
	if testing.Short() {
		t.Skip("soak skipped in -short mode")
	}
	for _, cache := range []string{"inmemory", "redis"} {
		t.Run("cache="+cache, func(t *testing.T) {
			t.Parallel()
			soak(t, addr, cache)
		})
	}
}

// distributionCacheDB is the Redis database of Distribution's own blob
// descriptor cache in TestSoak's cache=redis run. Its keys carry no prefix, so
// they are kept out of the database the tests' prefixed keys live in.
const distributionCacheDB = 9

// soakRun is what one soak measured, for its report and its judges.
type soakRun struct {
	cache            string
	clients          int
	elapsed          time.Duration
	images, dangling int
	before, after    *linkdb.Report
}

func soak(t *testing.T, addr, cache string) {
	d := workloadDuration(t, 20*time.Second)
	c := newCluster(t, addr, storagetest.RealPrefix(t, addr))
	if cache == "redis" {
		t.Cleanup(func() { cleanupDistributionCache(addr, distributionCacheDB) })
	}
	if cache == "inmemory" {
		// the trash on in one run (its judge below); the other deletes for
		// good, as the S3 and fault soaks do
		c.trashKeep = "1h"
	}
	c.startProcesses(t, 2, registrytest.WithHtpasswd("soak", "soak-password"), descriptorCache(addr, cache, distributionCacheDB))
	ctx := context.Background()
	// GC trusts the tracker only after it recorded for a full window.
	c.waitTrusted(ctx, t)

	w, err := newWorkload(c, 4)
	if err != nil {
		t.Fatal(err)
	}
	w.racing = true
	run := soakRun{cache: cache, clients: 4}
	start := time.Now()
	w.run(ctx, d, run.clients)
	run.elapsed = time.Since(start)

	// Everything that must survive, with no workload running: every
	// failure now is lost data.
	run.images, run.dangling = verifyAll(ctx, t, c.regs[0], soakRepos, w)
	if run.images == 0 {
		t.Error("no tagged image survived the workload: nothing was verified")
	}
	run.before = linkdbVerify(ctx, t, c.raw)
	t.Logf("linkdb verify after the workload: %s", summarize(run.before))
	judgeLinkDB(t, "after the workload", run.before)

	finalPass(ctx, t, c, soakRepos)
	run.after = linkdbVerify(ctx, t, c.raw)
	t.Logf("linkdb verify after the final collect and reclaimer pass: %s", summarize(run.after))
	judgeLinkDB(t, "after the final pass", run.after)
	run.after = c.sweepLeftovers(ctx, t, run.after)
	verifyAll(ctx, t, c.regs[1], soakRepos, w)
	if c.trashKeep != "" {
		judgeTrash(ctx, t, c)
	}
	w.report(ctx, t, run)
	w.judgeSoak(t)
}

// descriptorCache configures Distribution's blob descriptor cache of kind
// cache; the redis kind uses database db on the Redis at addr.
func descriptorCache(addr, cache string, db int) registrytest.Option {
	return registrytest.WithConfig(func(cfg *configuration.Configuration) {
		cfg.Storage["cache"] = configuration.Parameters{"blobdescriptor": cache}
		if cache == "redis" {
			cfg.Redis.Options.Addrs = []string{addr}
			cfg.Redis.Options.DB = db
		}
	})
}

// report logs what the soak did: operations, races, acknowledgements,
// refusals, collections and what the reclaimers did.
func (w *workload) report(ctx context.Context, t *testing.T, run soakRun) {
	t.Helper()
	var reviewed, deleted, freed int64
	for _, r := range w.c.regs {
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
	t.Logf("soak (blob descriptor cache %s): %v workload, %d processes, %d clients, 3 racers; %d pushes, %d images verified at the end, %d dangling tags excused; blobs %d -> %d",
		run.cache, run.elapsed.Round(time.Second), len(w.c.regs), run.clients, w.pushes.Load(), run.images, run.dangling, run.before.Blobs, run.after.Blobs)
	t.Logf("operations:\n%s", w.ops.String())
	t.Logf("racing operations:\n%s", w.races.String())
	t.Logf("acknowledged manifests pulled right after the 201:\n%s", w.acks.String())
	t.Logf("retryable refusals (%d):\n%s", w.refused.sum(""), w.refused.String())
	t.Logf("collections:\n%s", w.gcStats.String())
	t.Logf("reclaimers: reviewed=%d deleted=%d bytes=%d; collect freed %d bytes",
		reviewed, deleted, freed, w.gcStats.get("collect bytes freed"))
	t.Logf("integrity violations: %d; stale reverse links (leaks): %d after the workload, %d after the final pass",
		w.fails.sum(""), run.before.Counts[linkdb.StaleReverse], run.after.Counts[linkdb.StaleReverse])
	t.Logf("pushes failed with server errors (%d):\n%s", w.serverErrors.sum(""), w.serverErrors.String())
}

// judgeSoak fails the soak on any violation, on server errors or refusals
// that are not rare, and when a kind of operation or race never ran.
func (w *workload) judgeSoak(t *testing.T) {
	t.Helper()
	pushes, refusals := w.pushes.Load(), w.refused.sum("")
	if violations := w.fails.sum(""); violations > 0 {
		t.Errorf("%d operations lost data, broke an image or contradicted an answer:\n%s", violations, w.fails.String())
	}
	// Upstream's filesystem tag write racing a delete of the same tag (see
	// push): a rate, bounded at 1%. One such 500 is not a rate: a subtest
	// of the short form pushes only 50 to 100 images (each push is pulled
	// back before the next, and the racers share the CPU).
	if serverErrors := w.serverErrors.sum(""); serverErrors > 1 && serverErrors*100 > pushes {
		t.Errorf("more than 1%% of pushes failed with server errors: %d of %d", serverErrors, pushes)
	}
	if pushes > 0 && refusals*10 > pushes {
		t.Errorf("retryable refusals are not rare: %d for %d pushes", refusals, pushes)
	}
	if w.ops.sum("push image ok") == 0 || w.gcStats.get("collect 200") == 0 {
		t.Errorf("the workload did not exercise pushes and collections")
	}
	for _, kind := range requiredRaces {
		if w.races.sum(kind) == 0 {
			t.Errorf("no %q race ran", kind)
		}
	}
}

// cleanupDistributionCache deletes the soak's keys from Distribution's
// blob descriptor cache database. It is a cache: deleting an entry another
// run still uses only makes that run read the storage.
func cleanupDistributionCache(addr string, db int) {
	rc := redis.NewClient(&redis.Options{Addr: addr, DB: db})
	defer rc.Close()
	ctx := context.Background()
	for _, pattern := range []string{"repository::soak/*", "blobs::*"} {
		iter := rc.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			rc.Del(ctx, iter.Val())
		}
	}
}
