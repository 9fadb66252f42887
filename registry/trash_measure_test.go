package registry_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

// storageCalls counts the storage calls below the reclaim middleware (the
// gchook driver), by method.
type storageCalls struct {
	mu sync.Mutex
	n  map[string]int
}

func countCalls(t *testing.T) *storageCalls {
	c := &storageCalls{n: map[string]int{}}
	setHook(t, func(_ context.Context, method, _ string) error {
		c.mu.Lock()
		c.n[method]++
		c.mu.Unlock()
		return nil
	})
	return c
}

func (c *storageCalls) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.n
	c.n = map[string]int{}
	return out
}

func total(m map[string]int) (n int) {
	for _, v := range m {
		n += v
	}
	return n
}

func byMethod(m map[string]int) string {
	var s []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		s = append(s, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(s, " ")
}

// TestMeasureTrashCost measures what the trash adds: the storage calls and
// Redis round trips of a collect that deletes the same objects with the
// trash off and on, and of a pull answered 404. The goal of issue 27: at
// most one extra storage write per deleted object, and at most one Redis
// round trip per 404.
//
//	go test ./registry -run TestMeasureTrashCost -v
func TestMeasureTrashCost(t *testing.T) {
	const images = 10 // each: a manifest, a config and 2 layers, untagged
	type cost struct {
		calls, writes, deletes int
		rts                    int64
		objects                int
		wall                   time.Duration
		by                     string
	}
	run := func(t *testing.T, keep string) (collect cost, notFound cost) {
		var g *gcRegistry
		if keep == "" {
			g = startGC(t)
		} else {
			g = startTrash(t, descriptorCaches(t)["inmemory"], keep, nil)
		}
		repo := "measure/app"
		for i := range images {
			push(t, g, fmt.Sprintf("%s:v%d", repo, i), registrytest.Image(t, layer(t), layer(t)))
		}
		push(t, g, repo+":keep", registrytest.Image(t, layer(t)))
		for i := range images {
			untag(t, g, repo, fmt.Sprintf("v%d", i))
		}
		g.settle(t)
		calls := countCalls(t)
		rts := &storagetest.RedisCounter{}
		g.Server.Env().Tracker.Client().AddHook(rts)
		calls.take()
		rts.Reset()
		start := time.Now()
		rep := g.collect(t, repo)
		collect.wall = time.Since(start)
		m := calls.take()
		collect.calls, collect.writes, collect.deletes, collect.rts, collect.by = total(m), m["PutContent"], m["Delete"], rts.Count(), byMethod(m)
		collect.objects = len(rep.ManifestsDeleted) + len(rep.LayersUnlinked) + len(rep.BlobsDeleted)
		if len(rep.ManifestsDeleted) != images {
			t.Fatalf("collect deleted %d manifests, want %d", len(rep.ManifestsDeleted), images)
		}
		rts.Reset()
		if code := registrytest.ManifestStatus(t, g.Registry, repo+"@"+digest.FromString("never").String()); code != http.StatusNotFound {
			t.Fatalf("pull of an unknown manifest: %d", code)
		}
		notFound.rts = rts.Count() // a miss: nothing in the trash
		rts.Reset()
		if code := registrytest.ManifestStatus(t, g.Registry, repo+"@"+rep.ManifestsDeleted[0].String()); code != http.StatusNotFound {
			t.Fatalf("pull of a collected manifest: %d", code)
		}
		notFound.calls = int(rts.Count()) // a hit, its count written after the answer included
		return collect, notFound
	}
	offC, offNF := run(t, "")
	onC, onNF := run(t, "1h")
	t.Logf("collect of %d untagged images (%d objects removed from /v2/):", images, offC.objects)
	for _, c := range []struct {
		name string
		c    cost
	}{{"trash off", offC}, {"trash on", onC}} {
		t.Logf("  %-9s %4d storage calls (%3d writes, %3d deletes), %4d Redis round trips, %v; %s", c.name, c.c.calls, c.c.writes, c.c.deletes, c.c.rts, c.c.wall.Round(time.Millisecond), c.c.by)
	}
	links := images * 4 // manifests and layer links: the objects a hold is written for
	t.Logf("  per removed link: %+.2f storage calls, %+.2f writes, %+.2f Redis round trips with the trash on",
		float64(onC.calls-offC.calls)/float64(links), float64(onC.writes-offC.writes)/float64(links), float64(onC.rts-offC.rts)/float64(links))
	t.Logf("404 of a manifest never pushed: %d Redis round trips with the trash off, %d on", offNF.rts, onNF.rts)
	t.Logf("404 of a collected manifest: %d Redis round trips with the trash off, %d on (a hit: the day's count after the answer)", offNF.calls, onNF.calls)
	if extra := onC.writes - offC.writes; extra > links {
		t.Errorf("the trash added %d storage writes for %d removed links: more than one per object", extra, links)
	}
	if onNF.rts-offNF.rts > 1 {
		t.Errorf("a 404 costs %d Redis round trips more with the trash on, want at most 1", onNF.rts-offNF.rts)
	}
	if onNF.calls-offNF.calls > 2 {
		t.Errorf("a 404 that hits the trash costs %d Redis round trips more, want the lookup and the count", onNF.calls-offNF.calls)
	}
}

// BenchmarkTrashRestore times the restore of a collect run that removed
// 1,000 objects (250 untagged images: manifest, config, 2 layers), through
// POST /gc/v1/trash/restore?run=, on the filesystem:
//
//	RECLAIM_TEST_REDIS_ADDR=127.0.0.1:6379 go test ./registry -run '^$' -bench TrashRestore -benchtime 3x
func BenchmarkTrashRestore(b *testing.B) {
	g := startTrash(b, descriptorCaches(b)["inmemory"], "1h", nil)
	repo := "bench/restore"
	const images = 250
	for i := range images {
		push(b, g, fmt.Sprintf("%s:v%d", repo, i), registrytest.Image(b, layer(b), layer(b)))
	}
	push(b, g, repo+":keep", registrytest.Image(b, layer(b)))
	for i := range images {
		untag(b, g, repo, fmt.Sprintf("v%d", i))
	}
	for b.Loop() {
		b.StopTimer()
		g.settle(b)
		rep := g.collect(b, repo)
		if n := len(rep.ManifestsDeleted) + len(rep.LayersUnlinked); n != 4*images {
			b.Fatalf("collect removed %d links, want %d", n, 4*images)
		}
		b.StartTimer()
		res := g.restore(b, "run="+rep.RunID)
		if res.Restored != 4*images {
			b.Fatalf("restored %d entries, want %d", res.Restored, 4*images)
		}
	}
	b.ReportMetric(float64(4*images), "objects/op")
}
