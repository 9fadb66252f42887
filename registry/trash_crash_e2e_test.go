package registry_test

// The trash when a process dies, Redis loses its keys, or retention
// removed what is restored (docs/gc-protocol.md, case 14), on both
// descriptor caches.

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	ggcrv1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/reclaim/trashentry"
	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
	"github.com/reclaim-registry/reclaim/trash"
)

var errCrash = errors.New("test: the process died here")

// A collect "dies" between the hold and the delete of a manifest (the
// delete fails and so does the drop of its hold): the manifest is still
// linked and held. It still pulls; the next collect removes it (a second
// hold), and a restore by digest puts it back and drops both holds.
func TestE2ETrashCrashWhileMovingIn(t *testing.T) {
	onEachCache(t, func(t *testing.T, g *gcRegistry) {
		repo := "team/app"
		img := registrytest.Image(t, layer(t))
		d := digest.Digest(push(t, g, repo+":v1", img).String())
		push(t, g, repo+":v1", registrytest.Image(t, layer(t)))
		g.settle(t)
		// the manifest's delete fails, and so does the drop of its hold
		setHook(t, func(_ context.Context, method, path string) error {
			if method == "Delete" && (path == layout.RevisionDir(repo, d) || strings.HasPrefix(path, layout.TrashDir(d))) {
				return errCrash
			}
			return nil
		})
		code, body := g.collectRaw(t, repo, false)
		if code != http.StatusOK {
			t.Fatalf("collect: %d %s", code, body)
		}
		if r := reasonOf(decodeReport(t, body), reclaim.KindManifest, ggcrv1.Hash{Algorithm: "sha256", Hex: d.Encoded()}); r != "delete_failed" {
			t.Fatalf("the manifest's delete: %q, want delete_failed", r)
		}
		if l := g.trashList(t, "repository="+repo+"&digest="+d.String()); l.Total != 1 {
			t.Fatalf("holds left by the dead delete: %+v", l)
		}
		registrytest.AssertPullable(t, g.Registry, repo+"@"+d.String())
		setHook(t, func(context.Context, string, string) error { return nil })
		g.settle(t) // the pull above is older than the window
		rep2 := g.collect(t, repo)
		if !contains(rep2.ManifestsDeleted, ggcrv1.Hash{Algorithm: "sha256", Hex: d.Encoded()}) {
			t.Fatalf("second collect: %+v", rep2.ManifestsDeleted)
		}
		rep := g.restore(t, "repository="+repo+"&digest="+d.String())
		if outcomeOf(rep, reclaim.KindManifest, d) != trashentry.Restored || rep.Left != 0 {
			t.Fatalf("restore: %+v", rep)
		}
		registrytest.AssertPullable(t, g.Registry, repo+"@"+d.String())
		if l := g.trashList(t, "repository="+repo+"&digest="+d.String()); l.Total != 0 {
			t.Fatalf("holds left after the restore: %+v", l)
		}
		wantNoLoss(t, g, rep)
	})
}

// A restore "dies" halfway: the write of its second layer link fails.
// What it wrote is consistent (reverse link before forward link), the
// entries it did not finish stay, and a second restore finishes it.
func TestE2ETrashCrashDuringRestore(t *testing.T) {
	onEachCache(t, func(t *testing.T, g *gcRegistry) {
		repo := "team/app"
		_, d, run := trashed(t, g, repo)
		var mu sync.Mutex
		links := 0
		setHook(t, func(_ context.Context, method, path string) error {
			if method != "PutContent" || layout.Classify(path).Kind != layout.PathLayerLink {
				return nil
			}
			mu.Lock()
			defer mu.Unlock()
			if links++; links == 2 {
				return errCrash
			}
			return nil
		})
		first := g.restore(t, "run="+run)
		if first.Left == 0 || outcomeOf(first, reclaim.KindManifest, d) != trashentry.Failed {
			t.Fatalf("restore with a failing link write: %+v", first)
		}
		// the failed write's reverse link stays (a leak, never a
		// loss) until the second restore writes its forward link
		wantDataOf(t, g, first)
		if l := g.trashList(t, "run="+run); l.Total != first.Left {
			t.Fatalf("after the failed restore %d entries stay, want %d: %+v", l.Total, first.Left, l.Entries)
		}
		second := g.restore(t, "run="+run)
		if second.Left != 0 || outcomeOf(second, reclaim.KindManifest, d) != trashentry.Restored {
			t.Fatalf("second restore: %+v", second)
		}
		registrytest.AssertPullable(t, g.Registry, repo+"@"+d.String())
		wantNoLoss(t, g, second)
	})
}

// Redis loses every key of the registry while entries exist: a purge
// finds nothing to purge (it purges only what the index names) and frees
// nothing; a restore by repository and digest reads the holds in storage
// and puts the image back.
func TestE2ETrashRedisLost(t *testing.T) {
	onEachCache(t, func(t *testing.T, g *gcRegistry) {
		repo := "team/app"
		img, d, _ := trashed(t, g, repo)
		c := g.Server.Env().Tracker.Client()
		prefix := trashPrefix(t, g)
		if err := storagetest.ScanKeys(t.Context(), c, prefix+"*", func(k string) error { return c.Del(t.Context(), k).Err() }); err != nil {
			t.Fatal(err)
		}
		if l := g.trashList(t, ""); l.Total != 0 {
			t.Fatalf("the index survived: %+v", l)
		}
		g.settle(t)
		// the purge is refused (the tracker lost its epoch too) or
		// finds nothing in the index: either way it frees nothing
		code, b := g.post(t, "/gc/v1/trash/purge?older_than=0s")
		var pr trash.PurgeReport
		if code == http.StatusOK && (json.Unmarshal(b, &pr) != nil || len(pr.Entries) != 0) || code != http.StatusOK && code != http.StatusServiceUnavailable {
			t.Fatalf("purge with the index lost: %d %s", code, b)
		}
		for _, b := range blobsOf(t, img) {
			if _, err := g.raw.Stat(t.Context(), layout.BlobDataPath(b)); err != nil {
				t.Fatalf("data of %s after the purge: %v", b, err)
			}
		}
		rep := g.restore(t, "repository="+repo+"&digest="+d.String())
		if outcomeOf(rep, reclaim.KindManifest, d) != trashentry.Restored || rep.Left != 0 {
			t.Fatalf("restore from the holds in storage: %+v", rep)
		}
		registrytest.AssertPullable(t, g.Registry, repo+"@"+d.String())
		wantNoLoss(t, g, rep)
	})
}

// trashPrefix is the Redis key prefix of g: the one whose trash index
// holds g's entries.
func trashPrefix(t *testing.T, g *gcRegistry) string {
	t.Helper()
	l := g.trashList(t, "")
	if l.Total == 0 {
		t.Fatal("no entries to find the prefix by")
	}
	c := g.Server.Env().Tracker.Client()
	var prefix string
	err := storagetest.ScanKeys(t.Context(), c, "*trash:entries", func(k string) error {
		if ok, err := c.HExists(t.Context(), k, l.Entries[0].ID).Result(); err == nil && ok {
			prefix = strings.TrimSuffix(k, "trash:entries")
		}
		return nil
	})
	if err != nil || prefix == "" {
		t.Fatalf("prefix of entry %s: %q %v", l.Entries[0].ID, prefix, err)
	}
	return prefix
}

// Retention removes tags with the trash on; a restore of its plan puts
// every tag back at the digest it pointed at, and the images pull.
func TestE2ETrashRestoresARetentionPlan(t *testing.T) {
	onEachCache(t, func(t *testing.T, g *gcRegistry) {
		repo := "svc/app"
		vs := history(t, g, repo, 4, time.Now().Add(-400*day), day)
		declare(t, g, "prod", img(repo, vs[3]))
		p := g.preview(t, repo, `{"keep_newest":1,"rollback_slack":0,"min_age":"1h"}`)
		wantCandidates(t, p, vs[:3])
		g.apply(t, repo, p.ID)
		for i := range 3 {
			if tagged(t, g, repo, tagName(i)) {
				t.Fatalf("apply left %s", tagName(i))
			}
		}
		rep := g.restore(t, "plan="+p.ID)
		if rep.Restored != 3 || rep.Left != 0 {
			t.Fatalf("restore of plan %s: %+v", p.ID, rep)
		}
		for i := range 3 {
			if got := g.tagTarget(t, repo, tagName(i)); got != vs[i].String() {
				t.Fatalf("%s restored to %s, want %s", tagName(i), got, vs[i])
			}
			registrytest.AssertPullable(t, g.Registry, repo+":"+tagName(i))
		}
		wantNoLoss(t, g, rep)
	})
}
