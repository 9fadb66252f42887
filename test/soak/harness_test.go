package soak

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/distribution/distribution/v3/configuration"
	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
	"github.com/redis/go-redis/v9"

	"github.com/reclaim-registry/reclaim/redisstate"
	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/storage/linkdb"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

var soakDuration = flag.Duration("soak.duration", 0, "workload duration of TestSoak (default 30s, env RECLAIM_SOAK_DURATION)")

func TestMain(m *testing.M) { registrytest.Main(m) }

// workloadDuration is the -soak.duration flag, else $RECLAIM_SOAK_DURATION,
// else def.
func workloadDuration(t *testing.T, def time.Duration) time.Duration {
	if *soakDuration > 0 {
		return *soakDuration
	}
	if v := os.Getenv("RECLAIM_SOAK_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("RECLAIM_SOAK_DURATION=%q: %v", v, err)
		}
		return d
	}
	return def
}

// window is W for every soak registry: long enough for a push or a pull to
// finish inside it on a loaded CI machine, short enough to wait out often.
const window = 3 * time.Second

// reclaimInterval is the reclaimer's tick in the soak registries.
const reclaimInterval = 300 * time.Millisecond

// soakRedis is the real Redis when one is configured (with a key prefix of
// this test's own, deleted at cleanup), else a miniredis.
func soakRedis(t *testing.T) (addr, prefix, kind string) {
	if addr := storagetest.RealRedis(); addr != "" {
		return addr, storagetest.RealPrefix(t, addr), "redis-server"
	}
	return miniredis.RunT(t).Addr(), "soak:", "miniredis"
}

// middlewareOptions are the reclaim middleware options of every instance,
// on the Redis at redisAddrs (one address, or a Cluster's seed nodes).
func middlewareOptions(redisAddrs []string, prefix string) map[string]any {
	addrs := make([]any, len(redisAddrs))
	for i, a := range redisAddrs {
		addrs[i] = a
	}
	return map[string]any{
		"window":        window.String(),
		"dedup":         "50ms",
		"epochinterval": "1s",
		"prefix":        prefix,
		"redis":         map[string]any{"addrs": addrs},
		"gc":            map[string]any{"enabled": true},
		"reclaimer":     map[string]any{"enabled": true, "interval": reclaimInterval.String(), "batch": 50, "lease": "3s"},
	}
}

// quiet keeps the registry logs to warnings: a failing soak attaches them.
var quiet = registrytest.WithConfig(func(c *configuration.Configuration) { c.Log.Level = "warn" })

// cluster is N registry instances on one storage and one Redis.
type cluster struct {
	root string // the filesystem root; "" on S3
	raw  storagedriver.StorageDriver
	// storage is every instance's storage: WithRootDirectory(root), or
	// an S3 bucket's driver parameters
	storage    registrytest.Option
	redisAddrs []string
	prefix     string
	// tracker reads the Redis clock and the recording epoch under prefix.
	tracker *redisstate.Tracker
	regs    []*registrytest.Registry
	procs   []*registrytest.Process // nil entries for in-process instances
	// trashKeep, when set, turns the trash on (trash.keep) in every
	// instance started after it is set.
	trashKeep string
}

// newCluster prepares an empty filesystem storage for instances on the
// Redis at redisAddr, under prefix; start them with startProcesses or
// reclaim().
func newCluster(t *testing.T, redisAddr, prefix string) *cluster {
	t.Helper()
	root, raw := prepareStorage(t)
	c := newClusterOn(t, raw, registrytest.WithRootDirectory(root), []string{redisAddr}, prefix)
	c.root = root
	return c
}

// newClusterOn is a cluster on the storage raw reaches and storage
// configures (already marked complete), and on the Redis at redisAddrs:
// one address, or the seed nodes of a Redis Cluster.
func newClusterOn(t *testing.T, raw storagedriver.StorageDriver, storage registrytest.Option, redisAddrs []string, prefix string) *cluster {
	t.Helper()
	rc := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: redisAddrs})
	t.Cleanup(func() { rc.Close() })
	tr, err := redisstate.NewTracker(rc, redisstate.TrackerOptions{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return &cluster{raw: raw, storage: storage, redisAddrs: redisAddrs, prefix: prefix, tracker: tr}
}

// reclaim is the storage middleware of every instance of c.
func (c *cluster) reclaim() registrytest.Option {
	opts := middlewareOptions(c.redisAddrs, c.prefix)
	if c.trashKeep != "" {
		opts["trash"] = map[string]any{"keep": c.trashKeep}
	}
	return registrytest.WithStorageMiddleware("reclaim", opts)
}

// startProcesses starts n `registry serve` processes on c's storage with
// the reclaim middleware and opts, quiet.
func (c *cluster) startProcesses(t *testing.T, n int, opts ...registrytest.Option) {
	t.Helper()
	for range n {
		all := append([]registrytest.Option{c.storage, c.reclaim()}, opts...)
		p := registrytest.StartProcess(t, append(all, quiet)...)
		c.procs = append(c.procs, p)
		c.regs = append(c.regs, p.Registry)
	}
}

// prepareStorage marks the (empty) link database complete: the registries
// start on empty storage with the middleware, so it is complete from the
// start.
func prepareStorage(t *testing.T) (string, storagedriver.StorageDriver) {
	t.Helper()
	root := t.TempDir()
	raw, err := filesystem.FromParameters(map[string]any{"rootdirectory": root})
	if err != nil {
		t.Fatal(err)
	}
	if err := linkdb.MarkLinkDBComplete(context.Background(), raw, time.Now()); err != nil {
		t.Fatal(err)
	}
	return root, raw
}

func (c *cluster) pick(i int) *registrytest.Registry { return c.regs[i%len(c.regs)] }

func (c *cluster) other(r *registrytest.Registry) *registrytest.Registry {
	for _, x := range c.regs {
		if x != r {
			return x
		}
	}
	return r
}

// finalPass waits out the window, collects every repository (twice: what
// the first run kept as recently accessed by the verification pulls goes in
// the second) and lets the reclaimers drain the queue.
func finalPass(ctx context.Context, t *testing.T, c *cluster, repos []string) {
	t.Helper()
	for round := range 2 {
		c.waitOutWindow(ctx, t)
		for i, repo := range repos {
			code, _, err := collect(ctx, c.pick(i+round), repo)
			if code != http.StatusOK && code != http.StatusNotFound {
				t.Logf("final collect %s: %d %v", repo, code, err)
			}
		}
	}
	c.drainQueue(ctx, t)
}

// drainQueue waits until the review queue is empty: every queued blob was
// reviewed, and deleted or dropped, by some instance's reclaimer. A blob
// queued by the last collects is due a window later, one whose review
// failed comes back after its lease: a queue with nothing due is not yet
// drained.
func (c *cluster) drainQueue(ctx context.Context, t *testing.T) {
	t.Helper()
	q := redisstate.NewQueue(c.tracker.Client(), c.prefix, 0)
	var queued int64
	drained := poll(ctx, reclaimInterval, window+30*time.Second, func() bool {
		n, _, err := q.Len(ctx)
		queued = n
		return err == nil && n == 0
	})
	if !drained {
		t.Logf("%d blobs still queued for review %v after the final collects", queued, window+30*time.Second)
		c.explainQueued(ctx, t)
	}
}

// explainQueued logs, for each blob still queued, its due time and what
// holds it back: a fence (left by a killed collect until its lease ends)
// or an access record.
func (c *cluster) explainQueued(ctx context.Context, t *testing.T) {
	rc := c.tracker.Client()
	items, err := rc.ZRangeWithScores(ctx, c.prefix+"review", 0, 20).Result()
	if err != nil {
		t.Logf("read the queue: %v", err)
		return
	}
	for _, it := range items {
		blob := c.prefix + "{" + it.Member.(string) + "}"
		fence := rc.PTTL(ctx, blob+":f").Val()
		access, _ := rc.Get(ctx, blob+":a").Result()
		t.Logf("  queued %s due %s; blob fence ttl %v; last access %s", it.Member, time.UnixMilli(int64(it.Score)).UTC().Format(time.RFC3339Nano), fence, access)
	}
}

// sweepEnqueue runs `registry gc sweep --enqueue <config>`: the slow path
// that finds unreferenced blobs the queue does not know about.
func sweepEnqueue(t *testing.T, configPath string) string {
	t.Helper()
	out, err := exec.Command(registrytest.Binary(t), "gc", "sweep", "--enqueue", configPath).CombinedOutput()
	if err != nil {
		t.Fatalf("registry gc sweep --enqueue: %v\n%s", err, out)
	}
	return strings.TrimSpace(string(out))
}

// writeSweepConfig writes a config for the CLI on the soak's filesystem
// storage and Redis.
func writeSweepConfig(t *testing.T, c *cluster) string {
	t.Helper()
	cfg := fmt.Sprintf(`version: 0.1
storage:
  filesystem:
    rootdirectory: %s
middleware:
  storage:
    - name: reclaim
      options:
        window: %s
        dedup: 50ms
        prefix: %q
        redis:
          addrs: [%s]
        gc:
          enabled: true
`, c.root, window, c.prefix, strings.Join(c.redisAddrs, ", "))
	p := filepath.Join(t.TempDir(), "sweep.yml")
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
