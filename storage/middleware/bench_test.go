package middleware

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

// Measurements for issue 3: storage-driver calls and Redis round trips per
// push of a 5-layer image and per pull (cold: a fresh process over the same
// storage; warm: the same process right after), with and without the
// middleware. Run with -v to see the table:
//
//	go test -run TestMeasureCalls -v ./storage
//	RECLAIM_TEST_REDIS_ADDR=127.0.0.1:6379 go test -run TestMeasureCalls -v ./storage
//
// It also enforces the targets: one extra storage write per forward link,
// and no more than one Redis round trip per blob per operation.

type measure struct {
	counts map[string]int
	total  int
	writes int
	redis  int64
	// trips: round trips of steady-state work (EVALSHA/EVAL calls and
	// pipelines), without connection setup, which depends on how many
	// pooled connections a run opens
	trips    int64
	commands map[string]int64
}

func (m measure) String() string {
	keys := make([]string, 0, len(m.counts))
	for k := range m.counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m.counts[k]))
	}
	return fmt.Sprintf("driver calls %3d (writes %2d) redis %3d (trips %2d)  [%s]", m.total, m.writes, m.redis, m.trips, strings.Join(parts, " "))
}

func (a *testApp) snapshot() measure {
	m := measure{counts: a.count.Counts()}
	m.total, m.writes = a.count.Total()
	if a.rc != nil {
		m.redis = a.rc.Count()
		c := a.rc.Commands()
		// a new pooled connection sends HELLO, then CLIENT SETINFO as a
		// pipeline: neither is the middleware's work
		m.trips = c["evalsha"] + c["eval"] + c["pipeline"] - c["hello"]
		m.commands = c
	}
	return m
}

func (a *testApp) reset() {
	a.count.Reset()
	if a.rc != nil {
		a.rc.Reset()
	}
}

func countCalls(a *testApp, substr string, method string) int {
	n := 0
	for _, c := range a.count.Calls() {
		if strings.HasPrefix(c, method+" ") && strings.Contains(c, substr) {
			n++
		}
	}
	return n
}

func TestMeasureCalls(t *testing.T) {
	// One standalone Redis, the real one when configured: on a cluster each
	// master loads its scripts on first use, which a warm-up push cannot
	// cover for keys of other slots, so the count would measure that.
	var b storagetest.Backend
	for _, c := range storagetest.Backends(t) {
		if !c.Cluster {
			b = c
		}
	}
	img, _ := random.Image(1024, 5)
	for _, cache := range []string{"", "inmemory"} {
		for _, reclaim := range []bool{false, true} {
			name := fmt.Sprintf("cache=%q reclaim=%v", cache, reclaim)
			root := t.TempDir()
			a := newTestApp(t, appOptions{noReclaim: !reclaim, cache: cache, redisAddr: b.Addr, prefix: b.Prefix + "m:" + name + ":", root: root})
			// Steady state: connections dialed and scripts loaded by a
			// warm-up push of another image.
			warmImg, _ := random.Image(1024, 5) // same parallelism: the pool holds enough connections
			if err := a.push("warmup:v1", warmImg); err != nil {
				t.Fatal(err)
			}
			a.reset()
			if err := a.push("m:v1", img); err != nil {
				t.Fatal(err)
			}
			push := a.snapshot()
			fwd := countCalls(a, "/repositories/", "PutContent") - countCalls(a, "/_manifests/tags/", "PutContent") - countCalls(a, "/_uploads/", "PutContent")
			rev := countCalls(a, "/_repositories/", "PutContent")
			// re-push under another tag: every blob is there (HEAD), and
			// the manifest PUT writes its revision link again, whose
			// reverse link is there already
			a.reset()
			if err := a.push("m:v2", img); err != nil {
				t.Fatal(err)
			}
			repush := a.snapshot()
			repushRev := countCalls(a, "/_repositories/", "PutContent")

			// cold: a new process (empty caches, empty dedup) over the same storage
			c := newTestApp(t, appOptions{noReclaim: !reclaim, cache: cache, redisAddr: b.Addr, prefix: b.Prefix + "m:" + name + ":", root: root})
			c.pullAll("warmup:v1")
			c.reset()
			c.pullAll("m:v1")
			cold := c.snapshot()
			c.reset()
			c.pullAll("m:v1")
			warm := c.snapshot()
			t.Logf("%-28s push: %s", name, push)
			t.Logf("%-28s re-push: %s", name, repush)
			t.Logf("%-28s pull cold: %s", name, cold)
			t.Logf("%-28s pull warm: %s", name, warm)
			if reclaim {
				// 7 forward links: 5 layers + config (layer links) + manifest revision
				if fwd != 7 || rev != fwd {
					t.Errorf("%s: %d forward link writes, %d reverse: want 7 and one reverse each", name, fwd, rev)
				}
				t.Logf("%-28s forward link writes %d, reverse link writes %d", name, fwd, rev)
				if repushRev != 0 {
					t.Errorf("%s: a re-push wrote %d reverse links, want 0 (they are all there)", name, repushRev)
				}
				// 7 blobs; a push touches each blob in a few requests (HEAD,
				// upload commit, manifest PUT), a pull in one or two.
				// push: one round trip per upload commit (6) and one for
				// the whole manifest PUT (its references and itself,
				// pipelined: prefetch.go); pull: at most one per blob.
				if blobs := int64(7); push.trips > blobs || cold.trips > blobs || warm.trips > blobs {
					t.Errorf("%s: redis round trips push %d, pull cold %d, warm %d: over budget (push: %v)", name, push.trips, cold.trips, warm.trips, push.commands)
				}
			}
		}
	}
}

// Wall-time overhead, median of several runs:
//
//	go test -run XXX -bench 'Push|Pull' -count 6 ./storage
func BenchmarkPush(b *testing.B) {
	for _, reclaim := range []bool{false, true} {
		b.Run(fmt.Sprintf("reclaim=%v", reclaim), func(b *testing.B) {
			a := benchApp(b, reclaim)
			imgs := make([]v1.Image, b.N)
			for i := range imgs {
				imgs[i], _ = random.Image(4096, 5)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := a.push(fmt.Sprintf("bench:v%d", i), imgs[i]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkPull(b *testing.B) {
	for _, reclaim := range []bool{false, true} {
		b.Run(fmt.Sprintf("reclaim=%v", reclaim), func(b *testing.B) {
			a := benchApp(b, reclaim)
			img, _ := random.Image(4096, 5)
			if err := a.push("bench:v1", img); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				a.pullAll("bench:v1")
			}
		})
	}
}
