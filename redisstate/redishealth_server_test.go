package redisstate

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/storagetest/redistest"
)

// These tests run against a redis-server each starts for itself (skipped
// when redis-server is not installed), so they can restart it and set its
// maxmemory-policy without touching the Redis other tests share. Ticks are
// driven by calling StartRecording, as KeepRecording does every
// EpochInterval.

// startServer starts a private redis-server and a tracker on it.
func startServer(t *testing.T) (*redistest.RedisServer, *redis.Client, *Tracker) {
	t.Helper()
	s := redistest.StartRedisServer(t)
	return s, s.Client(t), serverTracker(t, s)
}

// configSet sets the server's configuration, key and value pairs in order.
func configSet(t *testing.T, c *redis.Client, kv ...string) {
	t.Helper()
	for i := 0; i+1 < len(kv); i += 2 {
		if err := c.ConfigSet(context.Background(), kv[i], kv[i+1]).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

func serverTracker(t *testing.T, s *redistest.RedisServer) *Tracker {
	t.Helper()
	tr, err := NewTracker(s.Client(t), TrackerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func tick(t *testing.T, tr *Tracker) time.Time {
	t.Helper()
	ctx := context.Background()
	if err := tr.StartRecording(ctx); err != nil {
		t.Fatalf("recording tick: %v", err)
	}
	e, err := tr.RecordingSince(ctx)
	if err != nil {
		t.Fatalf("epoch after the tick: %v", err)
	}
	return e
}

func infoField(t *testing.T, c *redis.Client, section, key string) string {
	t.Helper()
	s, err := c.Info(context.Background(), section).Result()
	if err != nil {
		t.Fatal(err)
	}
	return parseInfo(s)[key]
}

// (1) A restart that keeps the data (here all of it, from the append-only
// file; a snapshot would bring back an older state) leaves the epoch in
// place and no failed call behind: go-redis reconnects silently. Only the
// new run_id tells, and the tick must move the epoch: for the running
// process (its last tick) and for a process started afterwards (the state
// stored next to the epoch).
func TestRedisServerRestartMovesEpoch(t *testing.T) {
	s := redistest.StartRedisServer(t)
	ctx := context.Background()
	tr := serverTracker(t, s)
	e0 := tick(t, tr)
	if err := tr.Touch(ctx, reclaim.Object{Blob: dA}); err != nil {
		t.Fatal(err)
	}
	run0 := infoField(t, s.Client(t), "server", "run_id")
	before, gaps := moves(LossRestart), moves(LossGap)

	s.Restart(t)
	e1 := tick(t, tr)
	if _, ok, err := tr.LastAccess(ctx, reclaim.Object{Blob: dA}); err != nil || !ok {
		t.Fatalf("the restart lost the access record (ok=%v, %v): this test needs the data kept", ok, err)
	}
	if moves(LossGap) != gaps {
		t.Fatal("the restart surfaced as a failed call; this test is about a restart go-redis hides")
	}
	run1 := infoField(t, s.Client(t), "server", "run_id")
	if !e1.After(e0) {
		t.Fatalf("epoch %v -> %v across a restart (run_id %s -> %s): want it moved forward", e0, e1, run0, run1)
	}
	h := tr.RedisHealth()
	if h.LastLoss == nil || h.LastLoss.Reason != LossRestart || len(h.Nodes) != 1 || h.Nodes[0].RunID != run1 || moves(LossRestart)-before != 1 {
		t.Fatalf("health after restart: %+v, moves %v", h, moves(LossRestart)-before)
	}

	// Restart again, then a new process ticks first: it has no tick of
	// its own to compare with.
	s.Restart(t)
	fresh := serverTracker(t, s)
	if e2 := tick(t, fresh); !e2.After(e1) {
		t.Fatalf("a process started after a restart kept the epoch %v", e2)
	}
	if l := fresh.RedisHealth().LastLoss; l == nil || l.Reason != LossRestart {
		t.Fatalf("new process after restart: last loss %+v", l)
	}
}

// (2) Evictions under volatile-lru take keys with a TTL (access records,
// fences, tombstones) and leave the epoch, which has none. evicted_keys
// grows; the tick must move the epoch, even once the policy is back to
// noeviction.
func TestRedisServerEvictionsMoveEpoch(t *testing.T) {
	_, c, tr := startServer(t)
	ctx := context.Background()
	e0 := tick(t, tr)

	used, err := strconv.ParseInt(infoField(t, c, "memory", "used_memory"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	configSet(t, c, "maxmemory-policy", "volatile-lru", "maxmemory", strconv.FormatInt(used+512<<10, 10))
	val := make([]byte, 1024)
	for i := 0; infoField(t, c, "stats", "evicted_keys") == "0"; i++ {
		if i == 10000 {
			t.Fatal("no eviction after 10 MB of keys with a TTL")
		}
		if err := c.Set(ctx, "fill:"+strconv.Itoa(i), val, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// Policy back to noeviction: only evicted_keys remembers.
	configSet(t, c, "maxmemory", "0", "maxmemory-policy", "noeviction")
	if _, err := tr.RecordingSince(ctx); err != nil {
		t.Fatalf("the epoch did not survive the evictions (%v): this test needs it kept", err)
	}
	before := moves(LossEvicted)
	e1 := tick(t, tr)
	if !e1.After(e0) {
		t.Fatalf("epoch %v -> %v after %s evictions: want it moved forward", e0, e1, infoField(t, c, "stats", "evicted_keys"))
	}
	if h := tr.RedisHealth(); h.LastLoss == nil || h.LastLoss.Reason != LossEvicted || h.Evicts || moves(LossEvicted)-before != 1 {
		t.Fatalf("health after evictions: %+v", h)
	}
}

// While the policy evicts, the tracker refuses to vouch for its records.
func TestRedisServerEvictingPolicyRefuses(t *testing.T) {
	_, c, tr := startServer(t)
	ctx := context.Background()
	tick(t, tr)
	for _, policy := range []string{"allkeys-lru", "volatile-lru", "volatile-ttl", "allkeys-random"} {
		configSet(t, c, "maxmemory-policy", policy)
		if err := tr.StartRecording(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := tr.RecordingSince(ctx); !errors.Is(err, reclaim.ErrRedisEvicts) {
			t.Fatalf("%s: RecordingSince = %v, want ErrRedisEvicts", policy, err)
		}
		if h := tr.RedisHealth(); !h.Evicts || h.MaxmemoryPolicy != policy {
			t.Fatalf("%s: health %+v", policy, h)
		}
	}
	configSet(t, c, "maxmemory-policy", "noeviction")
	tick(t, tr)
}

// (4) No false positives: a noeviction server that keeps running, with
// records written, keys expiring and new processes starting, never moves
// the epoch. (Gaps are left out of the metric sum: other tests' trackers
// may count some; this tracker's own last_loss covers them.)
func TestRedisServerNoFalseEpochMoves(t *testing.T) {
	s, c, tr := startServer(t)
	ctx := context.Background()
	e0 := tick(t, tr)
	var total float64
	for _, r := range []LossReason{LossRestart, LossFailover, LossEvicted, LossStatsReset, LossNewMaster} {
		total += moves(r)
	}
	for i := range 5 {
		if err := tr.Touch(ctx, reclaim.Object{Blob: dA}, reclaim.Object{Blob: dA, Repo: "r", Kind: reclaim.LinkLayer}); err != nil {
			t.Fatal(err)
		}
		if err := c.Set(ctx, "short:"+strconv.Itoa(i), "x", time.Millisecond).Err(); err != nil {
			t.Fatal(err)
		}
		if e := tick(t, tr); !e.Equal(e0) {
			t.Fatalf("tick %d moved the epoch %v -> %v: %+v", i, e0, e, tr.RedisHealth())
		}
		// A new process on the same server.
		if e := tick(t, serverTracker(t, s)); !e.Equal(e0) {
			t.Fatalf("a new process moved the epoch %v -> %v", e0, e)
		}
	}
	var after float64
	for _, r := range []LossReason{LossRestart, LossFailover, LossEvicted, LossStatsReset, LossNewMaster} {
		after += moves(r)
	}
	h := tr.RedisHealth()
	if after != total || h.LastLoss != nil || h.Evicts || h.MaxmemoryPolicy != "noeviction" || h.Persistence != "aof" || h.Error != "" {
		t.Fatalf("moves %v -> %v, health %+v", total, after, h)
	}
}
