package soak

import (
	"context"
	"errors"
	"os/exec"
	"testing"
	"time"

	"github.com/distribution/distribution/v3/configuration"

	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/storage/linkdb"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
	"github.com/reclaim-registry/reclaim/storage/storagetest/redistest"
	"github.com/reclaim-registry/reclaim/storage/storagetest/s3test"
)

// s3Instances is how many `registry serve` processes share the bucket.
const s3Instances = 3

// stallRate is the fraction, in 1/1000, of blob-data answers that the S3
// soak's proxy holds back for longer than W.
const stallRate = 20

// TestSoakS3: three `registry serve` processes on one S3 bucket (versitygw
// on loopback, see s3test.StartS3) and one Redis, the reclaimer on in
// all of them; clients, racers and a collector per instance hit the
// instances at random, as behind a load balancer. A proxy between the
// instances and the bucket holds 2% of the answers to blob-data calls for
// W + 1 s (s3test.S3Staller): a request that stalls right after its
// existence check must end in a refusal, never a 201 for data that is
// gone. Then everything that must survive is pulled and verified, the link database is verified, a
// final collect and reclaimer pass leaves no unreferenced blob, and
// `registry linkdb rebuild` followed by `registry linkdb verify` (the
// binary, on an instance's config) is clean.
//
//	go test ./test/soak/ -run TestSoakS3 -v                          # short form
//	go test ./test/soak/ -run TestSoakS3 -v -soak.duration=10m -timeout=40m
//
// It runs twice, in parallel, on one S3 server: on a loopback Redis Cluster
// with Distribution's in-memory blob descriptor cache (the only kind a
// Cluster allows), when redis-server and redis-cli are installed (as in CI);
// and on the real Redis of RECLAIM_TEST_REDIS_ADDR with the redis cache
// kind, in a database of its own.
func TestSoakS3(t *testing.T) {
	t.Parallel() // mostly waiting out windows
	if testing.Short() {
		t.Skip("soak skipped in -short mode")
	}
	cluster, addr := redistest.ClusterAvailable(), storagetest.RealRedis()
	if !cluster && addr == "" {
		t.Skipf("TestSoakS3 needs redis-server and redis-cli for a Redis Cluster, or a real Redis: set %s=host:port", storagetest.RedisAddrEnv)
	}
	s3 := s3test.StartS3(t)
	if cluster {
		t.Run("redis=cluster,cache=inmemory", func(t *testing.T) {
			t.Parallel()
			// What large registries run: the instances share a Redis
			// Cluster (3 masters, 3 replicas), so every script must keep
			// to one slot.
			rc := redistest.StartCluster(t)
			soakS3(t, s3, "/soak-cluster", rc.Addrs(), "soak:", "inmemory")
		})
	}
	if addr != "" {
		t.Run("redis=standalone,cache=redis", func(t *testing.T) {
			t.Parallel()
			t.Cleanup(func() { cleanupDistributionCache(addr, s3CacheDB) })
			soakS3(t, s3, "/soak-redis", []string{addr}, storagetest.RealPrefix(t, addr), "redis")
		})
	}
}

// s3CacheDB is the Redis database of Distribution's blob descriptor cache
// in TestSoakS3's cache=redis run: not TestSoak's, whose storage (and so
// whose truth about which blob exists) is another.
const s3CacheDB = distributionCacheDB + 1

// s3Storage configures an instance's storage as the s3 driver with params.
func s3Storage(params map[string]any) registrytest.Option {
	return registrytest.WithConfig(func(cfg *configuration.Configuration) {
		delete(cfg.Storage, "filesystem")
		cfg.Storage["s3"] = configuration.Parameters(params)
	})
}

// newS3Cluster is a cluster on a fresh root directory of s3's bucket,
// marked complete, with its instances talking to endpoint (s3's own, or a
// counting proxy in front of it).
func newS3Cluster(t *testing.T, s3 *s3test.S3, endpoint, root string, redisAddrs []string, prefix string) *cluster {
	t.Helper()
	raw := s3.Driver(t, root)
	if err := linkdb.MarkLinkDBComplete(context.Background(), raw, time.Now()); err != nil {
		t.Fatal(err)
	}
	return newClusterOn(t, raw, s3Storage(s3.Params(endpoint, root)), redisAddrs, prefix)
}

func soakS3(t *testing.T, s3 *s3test.S3, root string, redisAddrs []string, prefix, cache string) {
	// Longer than TestSoak's 20 s: on S3 (versitygw on the same loaded
	// cores) a push is slower, and every kind of race must run at least
	// once (judgeSoak).
	d := workloadDuration(t, 45*time.Second)
	// Every instance talks to the bucket through a proxy that holds back
	// stallRate of the answers to blob-data calls for longer than W, after
	// the store gave them (docs/gc-protocol.md, case 12).
	stall := s3test.NewS3Staller(t, s3.Endpoint, stallRate, window+time.Second)
	c := newS3Cluster(t, s3, stall.URL, root, redisAddrs, prefix)
	c.startProcesses(t, s3Instances, registrytest.WithHtpasswd("soak", "soak-password"), descriptorCache(redisAddrs[0], cache, s3CacheDB))
	ctx := context.Background()
	c.waitTrusted(ctx, t)

	w, err := newWorkload(c, 4)
	if err != nil {
		t.Fatal(err)
	}
	w.racing = true
	run := soakRun{cache: cache + ", storage s3", clients: 2 * s3Instances}
	start := time.Now()
	w.run(ctx, d, run.clients)
	run.elapsed = time.Since(start)
	stall.Rate.Store(0)
	seen, stalled := stall.Counts()
	t.Logf("stalls: %d of %d blob-data answers held back for %v (longer than W = %v)", stalled, seen, stall.Delay, window)
	if stalled == 0 {
		t.Error("no blob-data answer was held back: the stall mode did not run")
	}

	run.images, run.dangling = verifyAll(ctx, t, c.regs[0], soakRepos, w)
	if run.images == 0 {
		t.Error("no tagged image survived the workload: nothing was verified")
	}
	run.before = linkdbVerify(ctx, t, c.raw)
	t.Logf("linkdb verify after the workload: %s", summarize(run.before))
	judgeLinkDB(t, "after the workload", run.before)

	// A Redis call that timed out under load moves the epoch (the gap is
	// untrusted): the final pass judges leaks only once GC trusts again.
	c.waitTrusted(ctx, t)
	finalPass(ctx, t, c, soakRepos)
	run.after = linkdbVerify(ctx, t, c.raw)
	t.Logf("linkdb verify after the final collect and reclaimer pass: %s", summarize(run.after))
	judgeLinkDB(t, "after the final pass", run.after)
	run.after = c.sweepLeftovers(ctx, t, run.after)
	verifyAll(ctx, t, c.regs[len(c.regs)-1], soakRepos, w)
	rebuildAndVerify(t, c.procs[0].ConfigPath)
	verifyAll(ctx, t, c.regs[1], soakRepos, w)
	w.report(ctx, t, run)
	w.judgeSoak(t)
}

// rebuildAndVerify runs `registry linkdb rebuild` (online: the instances
// still serve, idle; no age guard, nothing is in flight) and then `registry
// linkdb verify`, which must exit 0: clean, not even a leak left.
func rebuildAndVerify(t *testing.T, configPath string) {
	t.Helper()
	bin := registrytest.Binary(t)
	out, err := exec.Command(bin, "linkdb", "rebuild", configPath, "--workers", "4", "--min-age", "0").CombinedOutput()
	if err != nil {
		t.Fatalf("registry linkdb rebuild: %v\n%s", err, out)
	}
	t.Logf("registry linkdb rebuild:\n%s", out)
	out, err = exec.Command(bin, "linkdb", "verify", configPath, "--workers", "4").CombinedOutput()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		t.Errorf("registry linkdb verify after the rebuild: exit %d, want 0 (clean)\n%s", exit.ExitCode(), out)
	case err != nil:
		t.Fatalf("registry linkdb verify: %v", err)
	default:
		t.Logf("registry linkdb verify after the rebuild:\n%s", out)
	}
}
