package console_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/reclaim-registry/reclaim/gc/collector"
	"github.com/reclaim-registry/reclaim/registry/console"
	"github.com/reclaim-registry/reclaim/registry/registrytest"
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
	settle(t, r)
	if code, body := f.api(t, http.MethodDelete, "/v2/team/app/manifests/v1"); code != http.StatusAccepted {
		t.Fatalf("DELETE team/app:v1: %d %s", code, body)
	}
	settle(t, r)
	code, body := f.api(t, http.MethodPost, "/gc/v1/repositories/team/app/collect?dry_run=false")
	rep := &collector.Report{}
	if err := json.Unmarshal(body, rep); code != http.StatusOK || err != nil {
		t.Fatalf("collect team/app: %d %s", code, body)
	}
	if len(rep.ManifestsDeleted) != 1 || len(rep.BlobsInTrash) == 0 || rep.RestorableUntil == nil || len(rep.BlobsDeleted) != 0 {
		t.Fatalf("collect with the trash on: %d manifests deleted, %d blobs in the trash, %d deleted, restorable until %v",
			len(rep.ManifestsDeleted), len(rep.BlobsInTrash), len(rep.BlobsDeleted), rep.RestorableUntil)
	}
	m := rep.ManifestsDeleted[0].String()
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
	b.sees("#plan", "to trash", "restorable: in the trash")
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
	// what is left of the run: restored with it, or said why not
	if b.count(`#trash-groups form`) > 0 {
		b.run(chromedp.Click(chromedp.CSS(`#trash-groups form button`)), chromedp.WaitVisible(chromedp.CSS("#restore-summary")))
		b.shoot("trash-restored-run")
		t.Logf("restore of the rest of the run: %s", b.text("#restore-report"))
	}
}
