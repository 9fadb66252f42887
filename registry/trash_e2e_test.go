package registry_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/reclaim/trashentry"
	"github.com/reclaim-registry/reclaim/registry"
	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/trash"
)

// Recoverable deletion end to end (issue 27), through the HTTP API and a
// real client, on both blob descriptor caches.

// descriptorCaches are the blob descriptor caches the e2e tests run on: the redis
// one needs a real Redis (RECLAIM_TEST_REDIS_ADDR; CI has one).
func descriptorCaches(t testing.TB) map[string]registrytest.Option {
	out := map[string]registrytest.Option{"inmemory": registrytest.WithConfig(func(cfg *configuration.Configuration) {})}
	if addr := os.Getenv("RECLAIM_TEST_REDIS_ADDR"); addr != "" {
		out["redis"] = registrytest.WithConfig(func(cfg *configuration.Configuration) {
			cfg.Storage["cache"] = configuration.Parameters{"blobdescriptor": "redis"}
			cfg.Redis.Options.Addrs = []string{addr}
			cfg.Redis.Options.DB = 5
		})
	}
	return out
}

// startTrash starts a registry with GC on and the trash keeping entries
// for keep.
func startTrash(t testing.TB, cache registrytest.Option, keep string, extra map[string]any) *gcRegistry {
	t.Helper()
	opts := reclaimOptions(t, e2eWindow, "")
	tr := map[string]any{"keep": keep}
	for k, v := range extra {
		tr[k] = v
	}
	opts["trash"] = tr
	g := completeGC(t, registrytest.Start(t, cache,
		registrytest.WithStorageMiddleware("gchook", nil),
		registrytest.WithStorageMiddleware("reclaim", opts)))
	dropKeysAtEnd(t, g, opts)
	return g
}

type trashListing struct {
	Entries   []trashentry.Entry `json:"entries"`
	Total     int                `json:"total"`
	BytesHeld int64              `json:"bytes_held"`
}

func (g *gcRegistry) trashList(t *testing.T, query string) trashListing {
	t.Helper()
	code, _, b := g.send(t, http.MethodGet, "/gc/v1/trash?"+query, "")
	if code != http.StatusOK {
		t.Fatalf("GET /gc/v1/trash?%s: %d %s", query, code, b)
	}
	var l trashListing
	if err := json.Unmarshal(b, &l); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return l
}

func (g *gcRegistry) restore(t testing.TB, query string) trash.RestoreReport {
	t.Helper()
	code, b := g.post(t, "/gc/v1/trash/restore?"+query)
	if code != http.StatusOK {
		t.Fatalf("POST /gc/v1/trash/restore?%s: %d %s", query, code, b)
	}
	var rep trash.RestoreReport
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return rep
}

// TestE2ETrashRestoresACollect: a collect with the trash on removes an
// untagged image from /v2/ exactly as without it, frees nothing, and the
// restore of its run makes it pull again byte for byte.
func TestE2ETrashRestoresACollect(t *testing.T) {
	onEachCache(t, func(t *testing.T, g *gcRegistry) {
		repo := "team/app"
		old := registrytest.Image(t, layer(t), layer(t))
		oldD := push(t, g, repo+":v1", old)
		push(t, g, repo+":v1", registrytest.Image(t, layer(t))) // v1 moves: old is untagged
		g.settle(t)

		// the estimate says its bytes go to the trash first
		code, _, b := g.send(t, http.MethodGet, "/gc/v1/repositories/"+repo+"/usage?refresh=true", "")
		var u struct {
			Reclaimable      int64 `json:"reclaimable_bytes"`
			TrashKeepSeconds int64 `json:"trash_keep_seconds"`
		}
		if code != http.StatusOK || json.Unmarshal(b, &u) != nil || u.TrashKeepSeconds != 3600 {
			t.Fatalf("usage with the trash on: %d %s", code, b)
		}

		rep := g.collect(t, repo)
		if !contains(rep.ManifestsDeleted, oldD) || len(rep.LayersUnlinked) != 3 {
			t.Fatalf("collect: manifests %v, layer links %v", rep.ManifestsDeleted, rep.LayersUnlinked)
		}
		if len(rep.BlobsDeleted) != 0 || rep.BytesFreed != 0 || len(rep.BlobsInTrash) != 4 || rep.BytesInTrash == 0 || rep.RestorableUntil == nil {
			t.Fatalf("collect with the trash on: deleted %v (%d bytes), in trash %v (%d bytes), until %v",
				rep.BlobsDeleted, rep.BytesFreed, rep.BlobsInTrash, rep.BytesInTrash, rep.RestorableUntil)
		}
		if code := registrytest.ManifestStatus(t, g.Registry, repo+"@"+oldD.String()); code != http.StatusNotFound {
			t.Fatalf("pull of the collected manifest: %d, want 404 as without the trash", code)
		}
		for _, b := range blobsOf(t, old) {
			if _, err := g.raw.Stat(t.Context(), layout.BlobDataPath(b)); err != nil {
				t.Fatalf("data of %s: %v (the trash must keep it)", b, err)
			}
		}

		l := g.trashList(t, "run="+rep.RunID)
		if l.Total != 4 { // the manifest and its three layer links
			t.Fatalf("trash of run %s: %d entries, want 4: %+v", rep.RunID, l.Total, l.Entries)
		}
		for _, e := range l.Entries {
			if e.Repo != repo || e.By != "gc" || e.Reason != "unreferenced" || !e.Expires.After(e.Removed) || e.Size == 0 {
				t.Fatalf("entry %+v", e)
			}
		}
		if l.BytesHeld != rep.BytesInTrash {
			t.Fatalf("the listing holds %d bytes, the collect moved %d to the trash", l.BytesHeld, rep.BytesInTrash)
		}

		res := g.restore(t, "run="+rep.RunID)
		if res.Restored != 4 || res.Left != 0 {
			t.Fatalf("restore: %+v", res)
		}
		registrytest.AssertPullable(t, g.Registry, repo+"@"+oldD.String())
		if l := g.trashList(t, "repository="+repo); l.Total != 0 {
			t.Fatalf("after the restore the trash still holds %+v", l.Entries)
		}
		if len(res.AlsoRestored) != 0 {
			t.Fatalf("a run's restore names every entry itself, also restored: %+v", res.AlsoRestored)
		}
		g.checkLinks(t)
	})
}

// TestE2ETrashPurgeFreesWhatItHeld: a purge deletes the data the entries
// held, and exactly that.
func TestE2ETrashPurgeFreesWhatItHeld(t *testing.T) {
	g := startTrash(t, descriptorCaches(t)["inmemory"], "1h", nil)
	repo := "team/app"
	shared := layer(t)
	old := registrytest.Image(t, shared, layer(t))
	oldD := push(t, g, repo+":v1", old)
	push(t, g, repo+":v1", registrytest.Image(t, shared)) // old untagged; shared stays linked
	g.settle(t)
	rep := g.collect(t, repo)
	if !contains(rep.ManifestsDeleted, oldD) {
		t.Fatalf("collect: %+v", rep)
	}
	held := g.trashList(t, "")
	g.settle(t)
	code, hdr, b := g.send(t, http.MethodPost, "/gc/v1/trash/purge?older_than=0s", "")
	t.Logf("purge: %d %v %q", code, hdr, b)
	if code != http.StatusOK {
		t.Fatalf("purge: %d %s", code, b)
	}
	var pr trash.PurgeReport
	if err := json.Unmarshal(b, &pr); err != nil {
		t.Fatalf("%v: %q", err, b)
	}
	if len(pr.Entries) != held.Total || pr.BlobsFreed != 3 || pr.BytesFreed != rep.BytesInTrash {
		t.Fatalf("purge of %d entries (%d bytes held): %d entries, %d blobs, %d bytes freed: %s",
			held.Total, rep.BytesInTrash, len(pr.Entries), pr.BlobsFreed, pr.BytesFreed, b)
	}
	for _, d := range blobsOf(t, old) {
		_, err := g.raw.Stat(t.Context(), layout.BlobDataPath(d))
		if gone := layout.IsNotFound(err); gone == (d.String() == digestOf(t, shared).String()) {
			t.Fatalf("after the purge, %s gone=%v (%v)", d, gone, err)
		}
	}
	if l := g.trashList(t, ""); l.Total != 0 {
		t.Fatalf("after the purge: %+v", l)
	}
	code, b = g.collectRaw(t, repo, true)
	if code != http.StatusOK {
		t.Fatalf("dry run after purge: %d %s", code, b)
	}
}

// TestE2ETrashPullOfADeletedTag: a pull of a tag retention deleted is
// counted and answered 404; with trash.restoreonpull the tag is put back
// and the pull served.
func TestE2ETrashPullOfADeletedTag(t *testing.T) {
	for _, restore := range []bool{false, true} {
		t.Run(fmt.Sprintf("restoreonpull=%v", restore), func(t *testing.T) {
			g := startTrash(t, descriptorCaches(t)["inmemory"], "1h", map[string]any{"restoreonpull": restore})
			repo := fmt.Sprintf("svc/pull%v", restore)
			vs := history(t, g, repo, 4, time.Now().Add(-400*day), day)
			declare(t, g, "prod", img(repo, vs[3]))
			p := g.preview(t, repo, `{"keep_newest":1,"rollback_slack":0,"min_age":"720h"}`)
			rep := g.apply(t, repo, p.ID)
			if len(rep.Deleted) != 3 || rep.Deleted[0].Trash == "" {
				t.Fatalf("apply %+v", rep)
			}
			before := registry.TrashHits(repo, "tag")
			code := registrytest.ManifestStatus(t, g.Registry, repo+":v000")
			if hits := registry.TrashHits(repo, "tag") - before; hits != 1 {
				t.Fatalf("trash hits of the pull: %v, want 1", hits)
			}
			if !restore {
				if code != http.StatusNotFound {
					t.Fatalf("pull of a deleted tag: %d, want 404", code)
				}
				if l := g.trashList(t, "plan="+p.ID); l.Total != 3 {
					t.Fatalf("trash of the plan: %+v", l)
				}
				// a 404 for something never deleted is not a hit
				if code := registrytest.ManifestStatus(t, g.Registry, repo+":never"); code != http.StatusNotFound || registry.TrashHits(repo, "tag")-before != 1 {
					t.Fatalf("pull of an unknown tag: %d, hits %v", code, registry.TrashHits(repo, "tag")-before)
				}
				return
			}
			if code != http.StatusOK {
				t.Fatalf("pull of a deleted tag with restoreonpull: %d, want 200", code)
			}
			desc := registrytest.AssertPullable(t, g.Registry, repo+":v000")
			if desc.Digest.String() != vs[0].String() {
				t.Fatalf("v000 restored at %s, want %s", desc.Digest, vs[0])
			}
			if l := g.trashList(t, "plan="+p.ID); l.Total != 2 {
				t.Fatalf("after the restore on pull the plan's trash holds %d entries, want 2: %+v", l.Total, l.Entries)
			}
		})
	}
}

// waitTrash polls until ok holds (the reclaimer ticks in the background),
// for up to 30s.
func waitTrash(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !ok(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 30s for %s", what)
		}
	}
}

// TestE2ETrashReclaimerHoldsThenPurges: with the trash on, the reclaimer
// holds a blob nothing links instead of deleting it, and purges it (its
// data freed) once the entry expired.
func TestE2ETrashReclaimerHoldsThenPurges(t *testing.T) {
	opts := reclaimOptions(t, e2eWindow, "")
	opts["trash"] = map[string]any{"keep": "5s"}
	opts["reclaimer"] = map[string]any{"enabled": true, "interval": "50ms"}
	g := completeGC(t, registrytest.Start(t, registrytest.WithStorageMiddleware("gchook", nil), registrytest.WithStorageMiddleware("reclaim", opts)))
	dropKeysAtEnd(t, g, opts)
	repo := "team/orphan"
	m := push(t, g, repo+":v1", registrytest.Image(t, layer(t)))
	untag(t, g, repo, m.String()) // the manifest DELETE: its blob is queued for review
	g.settle(t)
	data := layout.BlobDataPath(digest.Digest(m.String()))
	var held trashentry.Entry
	waitTrash(t, "the reclaimer to hold the manifest blob", func() bool {
		for _, e := range g.trashList(t, "digest="+m.String()).Entries {
			held = e
		}
		return held.ID != ""
	})
	if held.Kind != reclaim.KindBlob || held.By != "reclaimer" || held.Repo != "" {
		t.Fatalf("entry %+v", held)
	}
	if _, err := g.raw.Stat(t.Context(), data); err != nil {
		t.Fatalf("a held blob's data: %v", err)
	}
	g.Age(t, 5*time.Second)
	waitTrash(t, "the reclaimer to purge the expired entry", func() bool {
		_, err := g.raw.Stat(t.Context(), data)
		return layout.IsNotFound(err)
	})
	if l := g.trashList(t, ""); l.Total != 0 {
		t.Fatalf("after the purge: %+v", l.Entries)
	}
}

// A restore of one manifest by digest brings its layers and config back
// too, and its answer names their entries (also_restored).
func TestE2ETrashRestoreByDigestBringsItsLayers(t *testing.T) {
	g := startTrash(t, descriptorCaches(t)["inmemory"], "1h", nil)
	repo := "team/digest"
	old := registrytest.Image(t, layer(t), layer(t))
	oldD := push(t, g, repo+":v1", old)
	push(t, g, repo+":v1", registrytest.Image(t, layer(t)))
	g.settle(t)
	rep := g.collect(t, repo)
	if !contains(rep.ManifestsDeleted, oldD) {
		t.Fatalf("collect: %+v", rep.ManifestsDeleted)
	}
	res := g.restore(t, "repository="+repo+"&digest="+oldD.String())
	if res.Restored != 1 || res.Left != 0 || len(res.AlsoRestored) != 3 {
		t.Fatalf("restore by digest: %+v", res)
	}
	registrytest.AssertPullable(t, g.Registry, repo+"@"+oldD.String())
	if l := g.trashList(t, "repository="+repo); l.Total != 0 {
		t.Fatalf("after the restore: %+v", l.Entries)
	}
}

// A 404 the trash looked at is sent as Distribution wrote it, with its
// Content-Length, for GET and HEAD, hit or miss (the OCI conformance suite
// checks the header).
func TestE2ETrashLookedAt404KeepsItsHeaders(t *testing.T) {
	g := startTrash(t, descriptorCaches(t)["inmemory"], "1h", nil)
	repo := "team/headers"
	old := push(t, g, repo+":v1", registrytest.Image(t, layer(t)))
	push(t, g, repo+":v1", registrytest.Image(t, layer(t)))
	g.settle(t)
	g.collect(t, repo)
	for _, path := range []string{
		"/v2/" + repo + "/manifests/" + old.String(),                    // a hit
		"/v2/" + repo + "/blobs/" + digest.FromString("never").String(), // a miss
		"/v2/" + repo + "/manifests/never",                              // a miss by tag
	} {
		for _, method := range []string{http.MethodGet, http.MethodHead} {
			resp := g.Do(t, method, path, nil)
			resp.Body.Close()
			if resp.StatusCode != http.StatusNotFound || resp.Header.Get("Content-Length") == "" || resp.Header.Get("Content-Type") == "" {
				t.Errorf("%s %s: %d, headers %v", method, path, resp.StatusCode, resp.Header)
			}
		}
	}
}

// onEachCacheGC runs body as a subtest per descriptor cache, on a fresh
// registry with GC on (startGC).
func onEachCacheGC(t *testing.T, body func(t *testing.T, g *gcRegistry)) {
	for cache, opt := range descriptorCaches(t) {
		t.Run(cache, func(t *testing.T) { body(t, startGC(t, opt)) })
	}
}

// onEachCache runs body as a subtest per descriptor cache, on a fresh
// registry with the trash on (trash.keep 1h).
func onEachCache(t *testing.T, body func(t *testing.T, g *gcRegistry)) {
	for cache, opt := range descriptorCaches(t) {
		t.Run(cache, func(t *testing.T) { body(t, startTrash(t, opt, "1h", nil)) })
	}
}
