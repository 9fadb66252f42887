package registry_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	dto "github.com/prometheus/client_model/go"

	"github.com/reclaim-registry/reclaim/reclaim/gcrun"
	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/linkdb"
	"github.com/reclaim-registry/reclaim/storage/storagetest/redistest"
)

// The scenes TestAlertRulesFire runs: each scripts a condition on a real
// in-process registry (real Redis where the other end-to-end tests use
// it, hooks where a failure must be forced) between scrapes of /metrics.
// Every rule of docs/alerts.yml fires in at least one; none fires in
// the healthy one.

func runScenes(t *testing.T) []alertScene {
	s := newScraper(t)
	var out []alertScene
	for _, sc := range []struct {
		name string
		run  func(*testing.T, *scraper) []alertScene
	}{
		{"healthy", sceneHealthy},
		{"run interrupted then failed", sceneRunLost},
		{"retention aborted", sceneRetention},
		{"redis evicts", sceneEvicts},
		{"redis lost its records", sceneUntrusted},
		{"redis down then back", sceneRedisDown},
		{"link database incomplete", sceneLinkDB},
		{"reclaimer off", sceneReclaimerOff},
		{"reclaimer stalled", sceneStalled},
		{"reverse-link write fails", sceneReverseLink},
		{"pull of something in the trash", sceneTrashHit},
	} {
		t.Run(sc.name, func(t *testing.T) { out = append(out, sc.run(t, s)...) })
	}
	if t.Failed() {
		t.FailNow()
	}
	return append(out, handWritten...)
}

// handWritten is the condition no scene scripts, as the two scrapes a
// registry in that state would give; checkRuleSeries ignores it.
//
//   - ReclaimReviewQueueGrowing wants over 1,000 blobs due for review: each
//     is a blob a collect or a manifest delete unlinked a window ago, so a
//     script needs over a thousand unlinked blobs, too slow for this test.
var handWritten = []alertScene{
	{name: "queue growing (hand-written)", synthetic: true, scrapes: []scrape{
		{values: map[string]float64{"reclaim_reclaimer_queue_due": 0}, kinds: gaugeKind("reclaim_reclaimer_queue_due")},
		{values: map[string]float64{"reclaim_reclaimer_queue_due": 1001}, kinds: gaugeKind("reclaim_reclaimer_queue_due")},
	}, fire: map[string][]map[string]string{"ReclaimReviewQueueGrowing": {{}}}},
}

func gaugeKind(name string) map[string]dto.MetricType {
	return map[string]dto.MetricType{name: dto.MetricType_GAUGE}
}

// waitScrape scrapes until ok holds (the registry's background work, such
// as a reclaimer tick, is seen only through its metrics), for up to 45s.
func (s *scraper) waitScrape(t *testing.T, what string, ok func(scrape) bool) scrape {
	t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	for {
		sc := s.scrape(t)
		if ok(sc) {
			return sc
		}
		if time.Now().After(deadline) {
			var ticks []string // what the reclaimer did instead, usually
			for sel, v := range sc.values {
				if strings.HasPrefix(sel, "reclaim_reclaimer_ticks_total") || strings.HasPrefix(sel, "reclaim_gc_runs_total") {
					ticks = append(ticks, fmt.Sprintf("%s %g", sel, v))
				}
			}
			t.Fatalf("waited 45s for %s; last scrape: %v", what, ticks)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// moreTicks waits until the reclaimer has ticked with result again since sc.
func (s *scraper) moreTicks(t *testing.T, sc scrape, result string) scrape {
	t.Helper()
	sel := `reclaim_reclaimer_ticks_total{result="` + result + `"}`
	return s.waitScrape(t, "a reclaimer tick "+result, func(n scrape) bool { return n.value(sel) > sc.value(sel) })
}

// withReclaimer turns the background reclaimer on, ticking every 50ms.
func withReclaimer(opts map[string]any) map[string]any {
	opts["reclaimer"] = map[string]any{"enabled": true, "interval": "50ms"}
	return opts
}

// startScene starts a GC registry on opts (reclaimOptions plus changes),
// with the test hook, its link database complete and a window recorded.
func startScene(t *testing.T, opts map[string]any) *gcRegistry {
	t.Helper()
	r := registrytest.Start(t, registrytest.WithStorageMiddleware("gchook", nil),
		registrytest.WithStorageMiddleware("reclaim", opts))
	g := completeGC(t, r)
	g.settle(t)
	return g
}

// uploadBlob uploads random bytes to repo: a POST, then one PUT with the
// bytes (the blob's link write), without client retries. It returns the
// PUT's status.
func uploadBlob(t *testing.T, g *gcRegistry, repo string) int {
	t.Helper()
	b := make([]byte, 64)
	_, _ = rand.Read(b)
	d := digest.FromBytes(b)
	loc := startUpload(t, g.Registry, repo)
	code, _, _ := send(t, g.Registry, http.MethodPut, withParam(loc, "digest", d.String()),
		http.Header{"Content-Type": {"application/octet-stream"}}, b)
	return code
}

// A registry with nothing wrong: pushes, a collect that deletes, the
// reclaimer ticking. No rule may fire.
func sceneHealthy(t *testing.T, s *scraper) []alertScene {
	g := startScene(t, withReclaimer(reclaimOptions(t, e2eWindow, "")))
	deletable(t, g, "healthy/app")
	before := s.moreTicks(t, s.scrape(t), "ok")
	g.collect(t, "healthy/app")
	registrytest.PushImage(t, g.Registry, "healthy/app:next", 1)
	// The tick timestamp is in whole seconds: wait until it moved.
	const ts = "reclaim_reclaimer_last_tick_timestamp_seconds"
	after := s.waitScrape(t, "the next tick's timestamp", func(n scrape) bool {
		return n.value(ts) > before.value(ts) && n.value(`reclaim_gc_runs_total{dry_run="false",status="done"}`) > before.value(`reclaim_gc_runs_total{dry_run="false",status="done"}`)
	})
	return []alertScene{{name: "healthy", scrapes: []scrape{before, after}}}
}

// A real run halts at its first blob delete (a hook); its lock expires
// (deleted, as a lease that ran out while the process was stopped), so
// the other instance, reading the run, marks it interrupted. The halted
// run finds its lock lost at its next renewal and ends failed.
func sceneRunLost(t *testing.T, s *scraper) []alertScene {
	opts := reclaimOptions(t, e2eWindow, "")
	g, other := startShared(t, opts)
	g.settle(t)
	deletable(t, g, "lost/app")
	halted, release := make(chan struct{}), make(chan struct{})
	var once, released sync.Once
	t.Cleanup(func() { released.Do(func() { close(release) }) })
	setHook(t, func(ctx context.Context, method, path string) error {
		if method != "Delete" || !strings.HasPrefix(path, layout.BlobsRoot+"/") || strings.Contains(path, "/_repositories") {
			return nil
		}
		once.Do(func() { close(halted) })
		select { // until the run's lock renewal (every lease/3, 20s) finds the lock gone
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-release:
			return errInjected
		}
	})
	before := s.scrape(t)
	code, body := g.post(t, "/gc/v1/repositories/lost/app/collect?dry_run=false&async=true")
	var acc struct {
		RunID string `json:"run_id"`
	}
	if err := json.Unmarshal(body, &acc); code != http.StatusAccepted || err != nil {
		t.Fatalf("async collect: %d %s", code, body)
	}
	select {
	case <-halted:
	case <-time.After(20 * time.Second):
		t.Fatal("the run never reached a blob delete")
	}
	prefix, _ := opts["prefix"].(string)
	if prefix == "" {
		prefix = "reclaim:"
	}
	if n := g.Server.Env().Tracker.Client().Del(t.Context(), prefix+"run:lost/app").Val(); n != 1 {
		t.Fatalf("the run's lock: %d keys deleted, want 1", n)
	}
	// The other instance reads the run from Redis: running, lock gone.
	resp := other.Do(t, http.MethodGet, "/gc/v1/runs/"+acc.RunID, nil)
	var rep struct {
		Status gcrun.Status `json:"status"`
	}
	err := json.NewDecoder(resp.Body).Decode(&rep)
	resp.Body.Close()
	if err != nil || rep.Status != gcrun.StatusInterrupted {
		t.Fatalf("run read by the other instance after its lock expired: %v %q", err, rep.Status)
	}
	const failed = `reclaim_gc_runs_total{dry_run="false",status="failed"}`
	after := s.waitScrape(t, "the run to end failed", func(n scrape) bool { return n.value(failed) > before.value(failed) })
	return []alertScene{{name: "run lost", scrapes: []scrape{before, after}, fire: map[string][]map[string]string{
		"ReclaimGCRunInterrupted": {{}},
		"ReclaimGCRunFailed":      {{}},
	}}}
}

// A retention preview with no in-use source aborts (inuse_empty).
func sceneRetention(t *testing.T, s *scraper) []alertScene {
	g := startRetention(t, nil)
	history(t, g, "ret/app", 2, time.Now().Add(-400*day), day)
	before := s.scrape(t)
	previewAborts(t, g, "ret/app", "inuse_empty")
	after := s.scrape(t)
	return []alertScene{{name: "retention aborted", scrapes: []scrape{before, after}, fire: map[string][]map[string]string{
		"ReclaimRetentionAborted": {{"reason": "inuse_empty"}},
	}}}
}

// Reclaim's own redis-server is set to allkeys-lru: collects are refused
// (a dry run lists the blocker) and the reclaimer's ticks abort.
func sceneEvicts(t *testing.T, s *scraper) []alertScene {
	srv := redistest.StartRedisServer(t)
	opts := withReclaimer(reclaimOptions(t, e2eWindow, srv.Addr))
	opts["epochinterval"] = "1h" // the scene drives the health checks
	g := startScene(t, opts)
	deletable(t, g, "evict/app")
	if err := srv.Client(t).ConfigSet(t.Context(), "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	if err := g.Server.Env().Tracker.StartRecording(t.Context()); err != nil {
		t.Fatal(err)
	}
	before := s.moreTicks(t, s.scrape(t), "redis_evicts")
	assertBlocked(t, g, "evict/app", "redis_evicts")
	after := s.moreTicks(t, before, "redis_evicts")
	return []alertScene{{name: "redis evicts", scrapes: []scrape{before, after}, fire: map[string][]map[string]string{
		"ReclaimRedisEvicts":       {{}},
		"ReclaimRedisUntrusted":    {{"reason": "redis_evicts"}, {"result": "redis_evicts"}},
		"ReclaimReclaimerRefusing": {{"result": "redis_evicts"}},
		"ReclaimGCRefusing":        {{"reason": "redis_evicts"}},
	}}}
}

// Redis lost the recording epoch (a flush, a failover to an empty
// replica): collects and ticks are refused as redis_untrusted until the
// next recording tick, which the scene holds off.
func sceneUntrusted(t *testing.T, s *scraper) []alertScene {
	opts := withReclaimer(reclaimOptions(t, e2eWindow, ""))
	opts["epochinterval"] = "1h"
	g := startScene(t, opts)
	deletable(t, g, "untrusted/app")
	prefix, _ := opts["prefix"].(string)
	if prefix == "" {
		prefix = "reclaim:"
	}
	if err := g.Server.Env().Tracker.Client().Del(t.Context(), prefix+"since").Err(); err != nil {
		t.Fatal(err)
	}
	before := s.moreTicks(t, s.scrape(t), "redis_untrusted")
	code, body := g.collectRaw(t, "untrusted/app", false)
	if c, r := decodeErr(t, body); code != http.StatusServiceUnavailable || c != "GC_ABORTED" || r != "redis_untrusted" {
		t.Fatalf("collect: %d %s", code, body)
	}
	after := s.moreTicks(t, before, "redis_untrusted")
	return []alertScene{{name: "redis untrusted", scrapes: []scrape{before, after}, fire: map[string][]map[string]string{
		"ReclaimRedisUntrusted":    {{"reason": "redis_untrusted"}, {"result": "redis_untrusted"}},
		"ReclaimReclaimerRefusing": {{"result": "redis_untrusted"}},
		"ReclaimGCRefusing":        {{"reason": "redis_untrusted"}},
	}}}
}

// Reclaim's own redis-server is killed: ten blob uploads are refused, a
// collect aborts, ticks abort. It is started again: the next recording
// tick moves the epoch over the gap and for the restart. Two scenes: down,
// and back.
func sceneRedisDown(t *testing.T, s *scraper) []alertScene {
	srv := redistest.StartRedisServer(t)
	opts := withReclaimer(reclaimOptions(t, e2eWindow, srv.Addr))
	opts["timeout"] = "200ms"
	opts["epochinterval"] = "1h"
	g := startScene(t, opts)
	deletable(t, g, "down/app")
	ok := s.moreTicks(t, s.scrape(t), "ok")
	srv.Kill()
	before := s.moreTicks(t, ok, "redis_unavailable")
	for range 10 {
		if code := uploadBlob(t, g, "down/app"); code != http.StatusServiceUnavailable {
			t.Fatalf("upload while Redis is down: %d, want 503", code)
		}
	}
	code, body := g.collectRaw(t, "down/app", false)
	if c, r := decodeErr(t, body); code != http.StatusServiceUnavailable || c != "GC_ABORTED" || r != "redis_unavailable" {
		t.Fatalf("collect: %d %s", code, body)
	}
	down := s.moreTicks(t, before, "redis_unavailable")
	srv.Start(t)
	s.waitScrape(t, "Redis to answer again", func(scrape) bool {
		return g.Server.Env().Tracker.StartRecording(t.Context()) == nil
	})
	back := s.scrape(t)
	return []alertScene{{name: "redis down", scrapes: []scrape{before, down}, fire: map[string][]map[string]string{
		"ReclaimRedisErrors":       {{}},
		"ReclaimWritesRefused":     {{"reason": "redis"}},
		"ReclaimRedisUntrusted":    {{"reason": "redis_unavailable"}, {"result": "redis_unavailable"}},
		"ReclaimReclaimerRefusing": {{"result": "redis_unavailable"}},
		"ReclaimGCRefusing":        {{"reason": "redis_unavailable"}},
	}}, {name: "redis back", scrapes: []scrape{down, back}, fire: map[string][]map[string]string{
		// The failed calls ended, and the new run_id was seen.
		"ReclaimRecordingGap": {{"reason": "gap"}, {"reason": "restart"}},
	}}}
}

// A registry whose link database is not marked complete: a real collect
// deletes the untagged manifest and keeps its blobs (linkdb_incomplete);
// the reclaimer's ticks stop on the same reason.
func sceneLinkDB(t *testing.T, s *scraper) []alertScene {
	r := registrytest.Start(t, registrytest.WithStorageMiddleware("gchook", nil),
		registrytest.WithStorageMiddleware("reclaim", withReclaimer(reclaimOptions(t, e2eWindow, ""))))
	g := &gcRegistry{Registry: r, raw: rawDriver(t, r)}
	// A fresh storage starts complete; an interrupted rebuild leaves it so.
	if err := linkdb.MarkLinkDBIncomplete(t.Context(), g.raw); err != nil {
		t.Fatal(err)
	}
	g.settle(t)
	deletable(t, g, "nolinkdb/app")
	before := s.scrape(t)
	code, body := g.collectRaw(t, "nolinkdb/app", false)
	if code != http.StatusOK || !strings.Contains(string(body), "linkdb_incomplete") {
		t.Fatalf("collect: %d %s", code, body)
	}
	after := s.moreTicks(t, before, "linkdb_incomplete")
	return []alertScene{{name: "linkdb incomplete", scrapes: []scrape{before, after}, fire: map[string][]map[string]string{
		"ReclaimLinkDBIncomplete": {{}},
	}}}
}

// The reclaimer is off (reclaimer.enabled false, the default) while the
// registry serves pushes.
func sceneReclaimerOff(t *testing.T, s *scraper) []alertScene {
	g := startScene(t, reclaimOptions(t, e2eWindow, ""))
	before := s.scrape(t)
	registrytest.PushImage(t, g.Registry, "off/app:v1", 1)
	after := s.scrape(t)
	return []alertScene{{name: "reclaimer off", scrapes: []scrape{before, after}, fire: map[string][]map[string]string{
		"ReclaimReclaimerOff": {{}},
	}}}
}

// The reclaimer's tick hangs on a storage call (a hook holds its read of
// the link database's completeness marker, which every tick checks): it
// is enabled and no longer ticks.
func sceneStalled(t *testing.T, s *scraper) []alertScene {
	startScene(t, withReclaimer(reclaimOptions(t, e2eWindow, "")))
	s.moreTicks(t, s.scrape(t), "ok")
	stuck, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { close(release) }) // before the registry stops (cleanups run last first)
	setHook(t, func(ctx context.Context, method, path string) error {
		if path == linkdbMarker {
			once.Do(func() { close(stuck) })
			<-release
		}
		return nil
	})
	select {
	case <-stuck:
	case <-time.After(20 * time.Second):
		t.Fatal("no tick read the completeness marker")
	}
	before := s.scrape(t)
	after := s.scrape(t)
	return []alertScene{{name: "reclaimer stalled", scrapes: []scrape{before, after}, fire: map[string][]map[string]string{
		"ReclaimReclaimerStalled": {{}},
	}}}
}

// linkdbMarker is where storage/linkdb keeps the completeness marker.
const linkdbMarker = "/reclaim/linkdb-complete"

// A reverse-link write fails (a hook's storage error): the upload that
// needed it is refused.
func sceneReverseLink(t *testing.T, s *scraper) []alertScene {
	g := startScene(t, reclaimOptions(t, e2eWindow, ""))
	setHook(t, func(ctx context.Context, method, path string) error {
		if method == "PutContent" && strings.Contains(path, "/_repositories/") {
			return errInjected
		}
		return nil
	})
	before := s.scrape(t)
	if code := uploadBlob(t, g, "rlink/app"); code < 500 {
		t.Fatalf("upload whose reverse link fails: %d, want an error", code)
	}
	after := s.scrape(t)
	return []alertScene{{name: "reverse link fails", scrapes: []scrape{before, after}, fire: map[string][]map[string]string{
		"ReclaimReverseLinkErrors": {{"op": "put"}},
	}}}
}

// A collect with the trash on removes an untagged manifest, then a client
// pulls it by digest: 404, and a trash hit.
func sceneTrashHit(t *testing.T, s *scraper) []alertScene {
	opts := reclaimOptions(t, e2eWindow, "")
	opts["trash"] = map[string]any{"keep": "1h"}
	g := startScene(t, opts)
	old := deletable(t, g, "trashhit/app")
	g.collect(t, "trashhit/app")
	before := s.scrape(t)
	if code := registrytest.ManifestStatus(t, g.Registry, "trashhit/app@"+old.String()); code != http.StatusNotFound {
		t.Fatalf("pull of a collected manifest: %d, want 404", code)
	}
	after := s.scrape(t)
	return []alertScene{{name: "trash hit", scrapes: []scrape{before, after}, fire: map[string][]map[string]string{
		"ReclaimTrashHit": {{"repository": "trashhit/app", "kind": "manifest"}},
	}}}
}
