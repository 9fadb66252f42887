package redisstate

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
	"github.com/redis/go-redis/v9"
)

// info is the part of an INFO reply the tick reads, as Redis prints it.
type info struct {
	runID, replID, replID2 string
	evicted, expired       int64
	policy                 string
}

func (i info) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Server\r\nredis_version:7.0.15\r\nrun_id:%s\r\nuptime_in_seconds:12\r\n\r\n", i.runID)
	fmt.Fprintf(&b, "# Replication\r\nrole:master\r\nmaster_replid:%s\r\nmaster_replid2:%s\r\n\r\n", i.replID, i.replID2)
	fmt.Fprintf(&b, "# Stats\r\nexpired_keys:%d\r\nevicted_keys:%d\r\n\r\n", i.expired, i.evicted)
	b.WriteString("# Persistence\r\nloading:0\r\naof_enabled:1\r\n\r\n")
	if i.policy != "" {
		fmt.Fprintf(&b, "# Memory\r\nused_memory:1000\r\nmaxmemory:0\r\nmaxmemory_policy:%s\r\n", i.policy)
	}
	return b.String()
}

func (i info) node(addr string) redisNode {
	n, _ := nodeFromInfo(addr, parseInfo(i.String()))
	return n
}

var (
	infoA   = info{runID: "aaaa1111", replID: "r1", replID2: "0000", policy: "noeviction"}
	infoB   = info{runID: "bbbb2222", replID: "s1", replID2: "0000", policy: "noeviction"}
	infoC   = info{runID: "cccc3333", replID: "t1", replID2: "0000", policy: "noeviction"}
	infoMod = func(i info, f func(*info)) info { f(&i); return i }
)

// TestLossBetween is the decision table: INFO of one master at two ticks
// -> move the epoch or not, and why.
func TestLossBetween(t *testing.T) {
	for _, tc := range []struct {
		name        string
		before, now info
		want        LossReason
	}{
		{"nothing changed", infoA, infoA, ""},
		{"keys expired (not evicted)", infoA, infoMod(infoA, func(i *info) { i.expired = 500 }), ""},
		{"policy changed, nothing evicted yet", infoA, infoMod(infoA, func(i *info) { i.policy = "allkeys-lru" }), ""},
		{"restart: new run_id, new replid", infoA, infoMod(infoA, func(i *info) { i.runID, i.replID = "aaaa9999", "r2" }), LossRestart},
		{"restart: new run_id, replid kept from RDB", infoA, infoMod(infoA, func(i *info) { i.runID = "aaaa9999" }), LossRestart},
		{"failover to a replica: its replid2 is the old replid", infoA, info{runID: "dddd4444", replID: "r2", replID2: "r1", policy: "noeviction"}, LossFailover},
		{"failover: same server, new replid", infoA, infoMod(infoA, func(i *info) { i.replID, i.replID2 = "r2", "r1" }), LossFailover},
		{"evictions", infoA, infoMod(infoA, func(i *info) { i.evicted = 3 }), LossEvicted},
		{"evictions under noeviction now (policy flipped and back)", infoMod(infoA, func(i *info) { i.evicted = 3 }), infoMod(infoA, func(i *info) { i.evicted = 4 }), LossEvicted},
		{"CONFIG RESETSTAT", infoMod(infoA, func(i *info) { i.evicted = 3 }), infoA, LossStatsReset},
		{"restart wins over evictions", infoA, infoMod(infoA, func(i *info) { i.runID, i.evicted = "aaaa9999", 7 }), LossRestart},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, detail := lossBetween(tc.before.node("x"), tc.now.node("x"))
			if got != tc.want {
				t.Fatalf("lossBetween = %q (%s), want %q", got, detail, tc.want)
			}
		})
	}
}

func TestParseInfo(t *testing.T) {
	n, ok := nodeFromInfo("h:1", parseInfo(infoMod(infoA, func(i *info) { i.evicted = 42; i.policy = "volatile-lru" }).String()))
	if !ok || n.runID != "aaaa1111" || n.replID != "r1" || n.replID2 != "0000" || n.evicted != 42 || n.policy != "volatile-lru" || !n.evicts() {
		t.Fatalf("parsed %+v ok=%v", n, ok)
	}
	// miniredis' INFO: no run_id, no evicted_keys.
	if n, ok := nodeFromInfo("", parseInfo("# Stats\ntotal_connections_received:1\r\n")); ok || n.evicted != -1 {
		t.Fatalf("miniredis INFO parsed as %+v ok=%v", n, ok)
	}
	for _, tc := range []struct {
		aof  string
		save *string
		want string
	}{
		{"1", nil, "aof"}, {"0", nil, ""}, {"0", ptr(""), "none"}, {"0", ptr("3600 1"), "rdb"}, {"1", ptr("3600 1"), "aof+rdb"},
	} {
		if got := persistenceOf(tc.aof, tc.save); got != tc.want {
			t.Errorf("persistenceOf(%s, %v) = %q, want %q", tc.aof, tc.save, got, tc.want)
		}
	}
	for k, want := range map[string]string{"reclaim:": "{reclaim:since}:nodes", "{r}:": "{r}:since:nodes"} {
		tr := &Tracker{opts: TrackerOptions{Prefix: k}}
		if got := tr.baselineKey(); got != want {
			t.Errorf("baselineKey with prefix %q = %q, want %q", k, got, want)
		}
	}
}

func ptr(s string) *string { return &s }

// fakeINFO makes the tracker's ticks read nodes from the map (a Redis
// Cluster when it has several entries) instead of the server.
type fakeINFO struct {
	nodes map[string]info
	err   error
}

func (f *fakeINFO) install(tr *Tracker) {
	tr.watch.read = func(context.Context) (map[string]redisNode, error) {
		if f.err != nil {
			return nil, f.err
		}
		out := map[string]redisNode{}
		for k, i := range f.nodes {
			out[k] = i.node(k)
		}
		return out, nil
	}
}

// replyError is an error reply of the server, as go-redis returns it.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

var _ redis.Error = replyError("")

func moves(r LossReason) float64 {
	return testutil.ToFloat64(metricEpochMoves.WithLabelValues(string(r)))
}

// TestTickMovesEpoch drives recording ticks over miniredis with INFO
// replies from the table: before, then after; the epoch must move exactly
// when something may have been lost, and the move is counted and reported.
func TestTickMovesEpoch(t *testing.T) {
	for _, tc := range []struct {
		name          string
		before, after map[string]info
		err           error // the second tick's INFO error
		want          LossReason
	}{
		{"no change", map[string]info{"master": infoA}, map[string]info{"master": infoA}, nil, ""},
		{"restart", map[string]info{"master": infoA}, map[string]info{"master": infoMod(infoA, func(i *info) { i.runID = "aaaa9999" })}, nil, LossRestart},
		{"eviction", map[string]info{"master": infoA}, map[string]info{"master": infoMod(infoA, func(i *info) { i.evicted = 1 })}, nil, LossEvicted},
		{"sentinel failover", map[string]info{"master": infoA}, map[string]info{"master": {runID: "dddd", replID: "r2", replID2: "r1", policy: "noeviction"}}, nil, LossFailover},
		{"cluster: unchanged", map[string]info{"a:1": infoA, "b:1": infoB}, map[string]info{"a:1": infoA, "b:1": infoB}, nil, ""},
		{"cluster: one master restarts", map[string]info{"a:1": infoA, "b:1": infoB}, map[string]info{"a:1": infoA, "b:1": infoMod(infoB, func(i *info) { i.runID = "bbbb9999" })}, nil, LossRestart},
		{"cluster: one master evicts", map[string]info{"a:1": infoA, "b:1": infoB}, map[string]info{"a:1": infoA, "b:1": infoMod(infoB, func(i *info) { i.evicted = 9 })}, nil, LossEvicted},
		{"cluster: a replica replaced a master", map[string]info{"a:1": infoA, "b:1": infoB}, map[string]info{"a:1": infoA, "c:1": infoC}, nil, LossNewMaster},
		{"cluster: a master left (slots moved)", map[string]info{"a:1": infoA, "b:1": infoB}, map[string]info{"a:1": infoA}, nil, ""},
		{"INFO denied now", map[string]info{"master": infoA}, nil, replyError("NOPERM this user has no permissions to run the 'info' command"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			m := miniredis.RunT(t)
			tr := newTestTracker(t, storagetest.Backend{Addr: m.Addr(), Prefix: "reclaim:", Mini: m})
			f := &fakeINFO{nodes: tc.before}
			f.install(tr)
			t0 := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
			m.SetTime(t0)
			if err := tr.StartRecording(ctx); err != nil {
				t.Fatal(err)
			}
			e0, err := tr.RecordingSince(ctx)
			if err != nil || !e0.Equal(t0) {
				t.Fatalf("epoch %v (%v), want %v", e0, err, t0)
			}
			before := moves(tc.want)
			m.SetTime(t0.Add(time.Minute))
			f.nodes, f.err = tc.after, tc.err
			if err := tr.StartRecording(ctx); err != nil {
				t.Fatal(err)
			}
			e1, err := tr.RecordingSince(ctx)
			if err != nil {
				t.Fatal(err)
			}
			h := tr.RedisHealth()
			if tc.want == "" {
				if !e1.Equal(e0) || h.LastLoss != nil {
					t.Fatalf("epoch moved %v -> %v (last loss %+v); want it kept", e0, e1, h.LastLoss)
				}
				return
			}
			if !e1.Equal(t0.Add(time.Minute)) {
				t.Fatalf("epoch %v -> %v, want moved to %v", e0, e1, t0.Add(time.Minute))
			}
			if h.LastLoss == nil || h.LastLoss.Reason != tc.want || !h.LastLoss.Epoch.Equal(e1) {
				t.Fatalf("last loss %+v, want %s at epoch %v", h.LastLoss, tc.want, e1)
			}
			if d := moves(tc.want) - before; d != 1 {
				t.Fatalf("reclaim_redis_epoch_moves_total{reason=%q} grew by %v, want 1", tc.want, d)
			}
			// The change is remembered: the next tick moves nothing.
			m.SetTime(t0.Add(2 * time.Minute))
			if err := tr.StartRecording(ctx); err != nil {
				t.Fatal(err)
			}
			if e2, _ := tr.RecordingSince(ctx); !e2.Equal(e1) {
				t.Fatalf("epoch moved again on an unchanged tick: %v -> %v", e1, e2)
			}
		})
	}
}

// A process that starts after Redis restarted from a snapshot has no
// previous tick of its own: it compares with the state stored next to the
// epoch, which the snapshot brought back with the old epoch.
func TestTickComparesWithStoredBaseline(t *testing.T) {
	ctx := context.Background()
	m := miniredis.RunT(t)
	b := storagetest.Backend{Addr: m.Addr(), Prefix: "reclaim:", Mini: m}
	t0 := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	m.SetTime(t0)
	tick := func(i info) (*Tracker, time.Time) {
		t.Helper()
		tr := newTestTracker(t, b) // a new process each time
		(&fakeINFO{nodes: map[string]info{"master": i}}).install(tr)
		if err := tr.StartRecording(ctx); err != nil {
			t.Fatal(err)
		}
		e, err := tr.RecordingSince(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return tr, e
	}
	// First process ever: nothing to compare with, nothing moves.
	if _, e := tick(infoA); !e.Equal(t0) {
		t.Fatalf("first tick moved the epoch to %v", e)
	}
	// Another process, same server: nothing moves.
	m.SetTime(t0.Add(time.Minute))
	if _, e := tick(infoA); !e.Equal(t0) {
		t.Fatalf("a new process on the same server moved the epoch to %v", e)
	}
	// Redis restarted while no process ran.
	m.SetTime(t0.Add(2 * time.Minute))
	tr, e := tick(infoMod(infoA, func(i *info) { i.runID = "aaaa9999" }))
	if !e.Equal(t0.Add(2*time.Minute)) || tr.RedisHealth().LastLoss.Reason != LossRestart {
		t.Fatalf("restart seen only through the stored state: epoch %v, loss %+v", e, tr.RedisHealth().LastLoss)
	}
	// Evictions while no process ran.
	m.SetTime(t0.Add(3 * time.Minute))
	if tr, e = tick(infoMod(infoA, func(i *info) { i.runID, i.evicted = "aaaa9999", 5 })); !e.Equal(t0.Add(3*time.Minute)) || tr.RedisHealth().LastLoss.Reason != LossEvicted {
		t.Fatalf("evictions seen only through the stored state: epoch %v, loss %+v", e, tr.RedisHealth().LastLoss)
	}
}

// While any master's policy may evict, RecordingSince (and so every GC
// precondition and every fence) refuses with ErrRedisEvicts; an unknown
// policy alone refuses nothing.
func TestEvictingPolicyRefuses(t *testing.T) {
	ctx := context.Background()
	m := miniredis.RunT(t)
	tr := newTestTracker(t, storagetest.Backend{Addr: m.Addr(), Prefix: "reclaim:", Mini: m})
	f := &fakeINFO{nodes: map[string]info{"a:1": infoA, "b:1": infoMod(infoB, func(i *info) { i.policy = "volatile-lru" })}}
	f.install(tr)
	m.SetTime(time.Now().Add(-time.Hour))
	if err := tr.StartRecording(ctx); err != nil {
		t.Fatal(err)
	}
	m.SetTime(time.Now())
	if _, err := tr.RecordingSince(ctx); !errors.Is(err, reclaim.ErrRedisEvicts) {
		t.Fatalf("RecordingSince with volatile-lru on b:1: %v, want ErrRedisEvicts", err)
	}
	if _, err := tr.Fence(ctx, reclaim.Object{Blob: dA}, time.Minute, time.Minute); !errors.Is(err, reclaim.ErrRedisEvicts) {
		t.Fatalf("Fence with volatile-lru on b:1: %v, want ErrRedisEvicts", err)
	}
	if h := tr.RedisHealth(); !h.Evicts || h.MaxmemoryPolicy != "volatile-lru" || len(h.Nodes) != 2 || h.Nodes[1].RunID != "bbbb2222" {
		t.Fatalf("health %+v", h)
	}
	if got := testutil.ToFloat64(metricRedisEvicts); got != 1 {
		t.Fatalf("reclaim_redis_evicts = %v, want 1", got)
	}
	// CONFIG disabled and no maxmemory_policy in INFO: unknown, not refused.
	f.nodes = map[string]info{"a:1": infoA, "b:1": infoMod(infoB, func(i *info) { i.policy = "" })}
	if err := tr.StartRecording(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.RecordingSince(ctx); err != nil {
		t.Fatalf("RecordingSince with an unknown policy: %v", err)
	}
	if h := tr.RedisHealth(); h.Evicts || h.MaxmemoryPolicy != "unknown" {
		t.Fatalf("health %+v", h)
	}
	f.nodes = map[string]info{"a:1": infoA, "b:1": infoB}
	if err := tr.StartRecording(ctx); err != nil {
		t.Fatal(err)
	}
	if h := tr.RedisHealth(); h.Evicts || h.MaxmemoryPolicy != "noeviction" || h.Persistence != "aof" {
		t.Fatalf("health %+v", h)
	}
}

// miniredis has no usable INFO. As an external Redis (tests) it reports
// "unknown" and never moves the epoch; as the embedded default it is
// noeviction and restarts with the process.
func TestMiniredisINFO(t *testing.T) {
	ctx := context.Background()
	m := miniredis.RunT(t)
	tr := newTestTracker(t, storagetest.Backend{Addr: m.Addr(), Prefix: "reclaim:", Mini: m})
	if err := tr.StartRecording(ctx); err != nil {
		t.Fatal(err)
	}
	e0, _ := tr.RecordingSince(ctx)
	for range 3 {
		m.FastForward(time.Second)
		if err := tr.StartRecording(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if e1, err := tr.RecordingSince(ctx); err != nil || !e1.Equal(e0) {
		t.Fatalf("epoch %v -> %v (%v)", e0, e1, err)
	}
	h := tr.RedisHealth()
	if h.Embedded || h.Evicts || h.MaxmemoryPolicy != "unknown" || !strings.Contains(h.Error, "INFO unavailable") || h.LastLoss != nil {
		t.Fatalf("health on miniredis: %+v", h)
	}
}
