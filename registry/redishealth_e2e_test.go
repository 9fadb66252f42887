package registry_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/reclaim-registry/reclaim/gc/reclaimer"
	"github.com/reclaim-registry/reclaim/redisstate"
	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/storage/storagetest/redistest"
)

// (3) An in-process registry on a redis-server of its own whose
// maxmemory-policy may evict: collect (dry run and real) is refused with
// GC_ABORTED redis_evicts and deletes nothing, the reclaimer's ticks abort
// the same way, and GET /gc/v1/status says why. Back to noeviction, the
// refusal lifts at the next recording tick, and since nothing was evicted
// the epoch did not move: collect deletes at once.
func TestE2ERedisEvictingPolicyRefusesGC(t *testing.T) {
	s := redistest.StartRedisServer(t)
	c := s.Client(t)
	ctx := t.Context()
	opts := reclaimOptions(t, e2eWindow, s.Addr)
	opts["epochinterval"] = "1h" // the test drives the ticks
	opts["reclaimer"] = map[string]any{"enabled": true, "interval": "50ms"}
	r := registrytest.Start(t, registrytest.WithStorageMiddleware("reclaim", opts))
	g := completeGC(t, r)
	env := r.Server.Env()
	tick := func() {
		t.Helper()
		if err := env.Tracker.StartRecording(ctx); err != nil {
			t.Fatal(err)
		}
	}
	health := func() (map[string]json.RawMessage, redisstate.RedisHealth, reclaimer.Status) {
		t.Helper()
		code, out, st := getStatus(t, r, false)
		if code != 200 {
			t.Fatalf("status: %d %s", code, out)
		}
		var h redisstate.RedisHealth
		if err := json.Unmarshal(out["redis_health"], &h); err != nil {
			t.Fatalf("redis_health %s: %v", out["redis_health"], err)
		}
		return out, h, st
	}
	old := push(t, g, "evict/app:v1", registrytest.Image(t, layer(t)))
	push(t, g, "evict/app:v1", registrytest.Image(t, layer(t))) // old is now untagged
	g.settle(t)

	for _, policy := range []string{"allkeys-lru", "volatile-lru"} {
		if err := c.ConfigSet(ctx, "maxmemory-policy", policy).Err(); err != nil {
			t.Fatal(err)
		}
		tick()
		assertBlocked(t, g, "evict/app", "redis_evicts")
		out, h, _ := health()
		if h.MaxmemoryPolicy != policy || !h.Evicts || h.Persistence != "aof" || len(h.Nodes) != 1 || h.Nodes[0].RunID == "" || h.Epoch.IsZero() {
			t.Fatalf("%s: redis_health %s", policy, out["redis_health"])
		}
		deadline := time.Now().Add(10 * time.Second)
		for _, _, st := health(); st.LastAbort != "redis_evicts"; _, _, st = health() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: reclaimer last_abort %q, want redis_evicts", policy, st.LastAbort)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	if err := c.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	tick()
	if out, h, _ := health(); h.MaxmemoryPolicy != "noeviction" || h.Evicts || h.LastLoss != nil {
		t.Fatalf("after noeviction: redis_health %s", out["redis_health"])
	}
	rep := g.collect(t, "evict/app")
	if len(rep.ManifestsDeleted) != 1 || rep.ManifestsDeleted[0].String() != old.String() {
		t.Fatalf("collect after noeviction deleted manifests %v, want [%s]: %+v", rep.ManifestsDeleted, old, rep)
	}
}
