package console_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/chromedp/chromedp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/gc/collector"
	"github.com/reclaim-registry/reclaim/registry/console"
	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// TestConsoleTrashInBrowser collects with the trash on, then finds what
// the collect removed on the overview, the run's page and the Trash page,
// clicks its restore button, and sees it back: in the outcome and in the
// registry.
func TestConsoleTrashInBrowser(t *testing.T) {
	chromium(t)
	r := startRegistry(t, func(opts map[string]any) { opts["trash"] = map[string]any{"keep": "1h"} })
	f := &fixture{Registry: r}
	registrytest.PushImage(t, r, "team/app:v1", 2)
	registrytest.PushImage(t, r, "team/app:v2", 1)
	v3 := registrytest.PushImage(t, r, "team/app:v3", 1)
	settle(t, r)
	for _, tag := range []string{"v1", "v3"} {
		if code, body := f.api(t, http.MethodDelete, "/v2/team/app/manifests/"+tag); code != http.StatusAccepted {
			t.Fatalf("DELETE team/app:%s: %d %s", tag, code, body)
		}
	}
	settle(t, r)
	code, body := f.api(t, http.MethodPost, "/gc/v1/repositories/team/app/collect?dry_run=false")
	rep := &collector.Report{}
	if err := json.Unmarshal(body, rep); code != http.StatusOK || err != nil {
		t.Fatalf("collect team/app: %d %s", code, body)
	}
	if len(rep.ManifestsDeleted) != 2 || len(rep.BlobsInTrash) == 0 || rep.RestorableUntil == nil || len(rep.BlobsDeleted) != 0 {
		t.Fatalf("collect with the trash on: %d manifests deleted, %d blobs in the trash, %d deleted, restorable until %v",
			len(rep.ManifestsDeleted), len(rep.BlobsInTrash), len(rep.BlobsDeleted), rep.RestorableUntil)
	}
	d3, err := v3.Digest()
	if err != nil {
		t.Fatal(err)
	}
	m := rep.ManifestsDeleted[0].String()
	if m == d3.String() {
		m = rep.ManifestsDeleted[1].String()
	}
	if code := registrytest.ManifestStatus(t, r, "team/app@"+m); code != http.StatusNotFound {
		t.Fatalf("the collected manifest answers %d; want 404 (in the trash)", code)
	}

	b := newBrowser(t, user, password)
	base := f.URL + console.Prefix
	b.open(base)
	b.sees("#card-trash", "Trash", "entries", "Trash hits, 7 days", "Keeps", "1h0m0s")
	b.sees("#recent", "team/app", "moved", "to trash (restorable until ")
	b.shoot("trash-overview")

	b.open(base + "runs/" + rep.RunID)
	b.sees("#moved-to-trash", plural(len(rep.BlobsInTrash), "blob"), "held, not freed", "restorable until")
	b.sees("#plan", "to trash", "in the trash")
	b.shoot("trash-run")

	b.open(base + "trash")
	b.sees("table.trash", "manifest", "team/app", shortOf(m), "unreferenced")
	b.sees("#trash-groups", rep.RunID, "Restore all")
	b.shoot("trash")

	b.run(chromedp.Click(chromedp.CSS(`table.trash form:has(input[name="digest"][value="`+m+`"]) button`)),
		chromedp.WaitVisible(chromedp.CSS("#restore-report")))
	b.sees("#restore-report", "put back", "restored", shortOf(m))
	b.shoot("trash-restored")
	if code := registrytest.ManifestStatus(t, r, "team/app@"+m); code != http.StatusOK {
		t.Errorf("after the restore, the manifest answers %d; want 200", code)
	}
	checkRestoreRun(t, b, r, base, v3)
}

// checkRestoreRun purges v3's layer, then restores the rest of the run on
// the Trash page: it puts back what it can and says what it could not.
func checkRestoreRun(t *testing.T, b *browser, r *registrytest.Registry, base string, v3 v1.Image) {
	t.Helper()
	d3, err := v3.Digest()
	if err != nil {
		t.Fatal(err)
	}
	layers, err := v3.Layers()
	if err != nil {
		t.Fatal(err)
	}
	lost, err := layers[0].Digest()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Server.Env().Raw.Delete(t.Context(), layout.BlobDir(digest.Digest(lost.String()))); err != nil {
		t.Fatal(err)
	}
	b.open(base + "trash")
	b.run(chromedp.Click(chromedp.CSS(`#trash-groups form button`)), chromedp.WaitVisible(chromedp.CSS("#restore-summary")))
	b.sees("#restore-summary", "left in the trash")
	b.sees("#restore-report", "purged: data gone", "its data is gone", shortOf(lost.String()))
	b.shoot("trash-restored-run")
	if code := registrytest.ManifestStatus(t, r, "team/app@"+d3.String()); code != http.StatusNotFound {
		t.Errorf("v3, whose layer is gone, answers %d after the restore; want 404", code)
	}
}
