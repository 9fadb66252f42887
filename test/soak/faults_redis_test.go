package soak

import (
	"context"
	"math/rand/v2"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/storage/linkdb"
	"github.com/reclaim-registry/reclaim/storage/storagetest/redistest"
)

// pinnedImage pushes an image nothing deletes, for "pulls keep working".
func pinnedImage(t *testing.T, w *workload, r *registrytest.Registry) {
	t.Helper()
	img, err := w.image(rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	rf, err := ref(r, "soak/pinned:keep")
	if err != nil {
		t.Fatal(err)
	}
	if err := remoteWrite(context.Background(), rf, img, r); err != nil {
		t.Fatalf("push pinned image: %v", err)
	}
}

// TestSoakRedisAndCrashFaults runs the workload on two serve processes
// while Redis is SIGKILLed (losing every record) and restarted, and while a
// registry process is SIGKILLed in the middle of collections. Pulls must
// keep working with Redis down, GC must delete nothing it cannot vouch for,
// and afterwards verify must be clean or show only leaks, which a re-run
// reclaims.
func TestSoakRedisAndCrashFaults(t *testing.T) {
	t.Parallel() // mostly waiting out windows: the three soaks overlap
	if testing.Short() {
		t.Skip("soak skipped in -short mode")
	}
	rd := redistest.StartRedisServer(t, redistest.Ephemeral())
	c := newCluster(t, rd.Addr, "soakfault:")
	c.startProcesses(t, 2)
	ctx := context.Background()
	c.waitTrusted(ctx, t)
	w, err := newWorkload(c, 3)
	if err != nil {
		t.Fatal(err)
	}
	pinnedImage(t, w, c.regs[0])
	done := make(chan struct{})
	go func() { defer close(done); w.run(ctx, 20*time.Second, 3) }()

	loseRedis(ctx, t, c, w, rd)
	killed := killMidCollect(ctx, t, c)
	<-done
	judgeAfterFaults(ctx, t, c, w, killed)
}

// loseRedis kills Redis once the workload is under way: pulls must go on
// and collections free nothing while it is down, and nothing right after it
// restarts empty, until the new epoch is a window old.
func loseRedis(ctx context.Context, t *testing.T, c *cluster, w *workload, rd *redistest.RedisServer) {
	t.Helper()
	if !poll(ctx, 50*time.Millisecond, 15*time.Second, func() bool { return w.acks.sum("") >= 8 }) {
		t.Logf("the workload had %d pushes acknowledged when Redis was killed", w.acks.sum(""))
	}
	rd.Kill()
	var pulls, pullFails, collectOK int
	// pacing: the pulls and collects are spread over a couple of seconds
	// of Redis being down, not sent in one burst
	tick := time.NewTicker(300 * time.Millisecond)
	defer tick.Stop()
	for i := range 6 {
		r := c.pick(i)
		if _, err := pullVerify(ctx, r, "soak/pinned", ":keep"); err != nil {
			pullFails++
			t.Errorf("pull with Redis down failed: %v", err)
		}
		pulls++
		code, freed, _ := collect(ctx, r, soakRepos[i%len(soakRepos)])
		if code == http.StatusOK && freed > 0 {
			collectOK++
		}
		<-tick.C
	}
	if collectOK > 0 {
		t.Errorf("%d collections freed bytes while Redis was down", collectOK)
	}
	rd.Start(t)
	// Everything Redis knew is gone: GC must not trust it for a window
	// from the epoch the registries write again.
	if !poll(ctx, 50*time.Millisecond, 10*time.Second, func() bool { _, err := c.tracker.RecordingSince(ctx); return err == nil }) {
		t.Fatal("no registry wrote a recording epoch into the restarted Redis")
	}
	for i, repo := range soakRepos {
		code, freed, _ := collect(ctx, c.pick(i), repo)
		if code == http.StatusOK && freed > 0 {
			t.Errorf("collect of %s freed %d bytes right after Redis lost its data", repo, freed)
		}
	}
	t.Logf("Redis down: %d/%d pulls served; collections refused; after restart collections refused until the epoch is a window old", pulls-pullFails, pulls)
}

// killMidCollect SIGKILLs a registry in the middle of collections, twice,
// and restarts it. It returns the kills.
func killMidCollect(ctx context.Context, t *testing.T, c *cluster) int {
	t.Helper()
	c.waitTrusted(ctx, t)
	rc := c.tracker.Client()
	killed := 0
	for round := range 2 {
		victim := c.procs[round%2]
		for _, repo := range soakRepos {
			if resp, err := send(ctx, victim.Registry, http.MethodPost, "/gc/v1/repositories/"+repo+"/collect?async=true&dry_run=false", nil, nil); err == nil {
				resp.Body.Close()
			}
		}
		if !poll(ctx, 2*time.Millisecond, 2*time.Second, func() bool { return len(runLocks(ctx, rc, c.prefix)) > 0 }) {
			t.Logf("no collection was seen holding its repository lock before the kill")
		}
		victim.Kill(t)
		killed++
		orphans := fences(ctx, rc, c.prefix)
		victim.Restart(t)
		// The killed run's repository lock and fences outlive it (their
		// leases, up to 2 minutes); an operator would wait them out. The
		// soak clears them, and says so. A fence still holding the token it
		// held when the registry died (seconds ago, after the restart) is
		// the dead run's: a live delete releases its fence within
		// milliseconds here, and a new fence has a new token.
		if n := clearLocks(ctx, rc, c.prefix); n > 0 {
			t.Logf("cleared %d repository locks left by the killed registry (lease not yet expired)", n)
		}
		if n := clearFences(ctx, rc, orphans); n > 0 {
			t.Logf("cleared %d fences left by the killed registry (lease not yet expired)", n)
		}
	}
	return killed
}

// judgeAfterFaults verifies every image and the link database, then lets
// a sweep, a final collect and the reclaimers reclaim what the faults
// left, and verifies again.
func judgeAfterFaults(ctx context.Context, t *testing.T, c *cluster, w *workload, killed int) {
	t.Helper()
	repos := slices.Concat(soakRepos, []string{"soak/pinned"})
	images, _ := verifyAll(ctx, t, c.regs[0], repos, nil)
	rep := linkdbVerify(ctx, t, c.raw)
	t.Logf("after Redis loss and %d registry kills: %d images verified; linkdb verify: %s", killed, images, summarize(rep))
	if rep.ExitCode > linkdb.ExitLeaks {
		t.Errorf("linkdb verify shows more than leaks (exit %d)", rep.ExitCode)
	}
	// Redis lost the review queue with everything else: the slow path
	// finds what the queue forgot.
	t.Logf("sweep: %s", sweepEnqueue(t, c.procs[0].ConfigPath))
	finalPass(ctx, t, c, soakRepos)
	after := linkdbVerify(ctx, t, c.raw)
	t.Logf("after the re-run: %s", summarize(after))
	if after.ExitCode > linkdb.ExitLeaks {
		t.Errorf("linkdb verify after the re-run shows more than leaks (exit %d)", after.ExitCode)
	}
	if n := after.Counts[linkdb.Reclaimable]; n > 0 {
		t.Errorf("the re-run left %d unreferenced blobs", n)
	}
	verifyAll(ctx, t, c.regs[1], repos, nil)
	t.Logf("operations:\n%s\nrefusals:\n%s\ncollections:\n%s", w.ops.String(), w.refused.String(), w.gcStats.String())
	if n := w.fails.sum(""); n > 0 {
		t.Errorf("%d operations lost data:\n%s", n, w.fails.String())
	}
}

// runLocks lists the repository locks (one per running collection) under
// prefix.
func runLocks(ctx context.Context, rc redis.UniversalClient, prefix string) []string {
	var keys []string
	iter := rc.Scan(ctx, 0, prefix+"run:*", 100).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	return keys
}

// fences returns every fence under prefix with the token that holds it.
func fences(ctx context.Context, rc redis.UniversalClient, prefix string) map[string]string {
	out := map[string]string{}
	iter := rc.Scan(ctx, 0, prefix+"{*}:f*", 100).Iterator()
	for iter.Next(ctx) {
		if tok, err := rc.Get(ctx, iter.Val()).Result(); err == nil {
			out[iter.Val()] = tok
		}
	}
	return out
}

// clearFences deletes each fence that still holds the token it had.
func clearFences(ctx context.Context, rc redis.UniversalClient, held map[string]string) int {
	n := 0
	for k, tok := range held {
		if v, _ := delIfScript.Run(ctx, rc, []string{k}, tok).Int(); v > 0 {
			n++
		}
	}
	return n
}

var delIfScript = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

func clearLocks(ctx context.Context, rc redis.UniversalClient, prefix string) int {
	n := 0
	for _, k := range runLocks(ctx, rc, prefix) {
		if rc.Del(ctx, k).Val() > 0 {
			n++
		}
	}
	return n
}
