package console_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/reclaim-registry/reclaim/gc/collector"
	"github.com/reclaim-registry/reclaim/registry/console"
	"github.com/reclaim-registry/reclaim/registry/registrytest"
)

// TestConsoleInBrowser loads every page of the console in headless Chromium
// against a registry with real data, checks what a person sees, and saves a
// screenshot of each page at desktop and phone width.
func TestConsoleInBrowser(t *testing.T) {
	chromium(t) // skip before building the fixture
	f := newFixture(t)
	b := newBrowser(t, user, password)
	base := f.URL + console.Prefix
	// team/app's collect wrote its usage; team/base gets an estimate now
	if code, body := f.api(t, http.MethodGet, "/gc/v1/repositories/team/base/usage?refresh=true"); code != http.StatusOK {
		t.Fatalf("usage of team/base: %d %s", code, body)
	}

	b.open(base)
	b.sees("#card-reclaimable", "Reclaimable", "team/base", "team/app", "of 2 ranked repositories")
	b.sees("#card-redis", "Redis", "trusted", "Recording since", "Epoch")
	b.sees("#card-linkdb", "complete")
	b.sees("#card-reclaimer", "on", "Queue")
	b.sees("#card-freed", "Deleted, last hour", "objects")
	b.sees("#card-freed-week", "Freed, all instances", "Today (UTC)", "Last 7 days",
		fmt.Sprintf("(%d bytes)", f.collected.BytesFreed))
	b.sees("#refusals", "team/base", "aborted", "redis_recording_too_short")
	b.sees("#recent", "team/app", "done")
	b.sees("#refusals", "team/base", "interrupted", "process died in step blobs")
	// the dry run made while Redis had recorded too short: blocked, shown as such
	b.sees("#refusals", "dry run", "blocked", "blocked (run): redis_recording_too_short until ")
	b.shoot("overview")

	b.open(base + "runs")
	b.sees("table.runs", "team/app", "team/base", "redis_recording_too_short")
	b.shoot("runs")
	b.open(base + "runs?status=refused")
	if got := b.text("table.runs"); strings.Contains(got, "team/app") {
		t.Errorf("runs?status=refused lists the done run of team/app:\n%s", got)
	}

	b.open(base + "runs?status=interrupted")
	b.sees("table.runs", "team/base", "interrupted")
	b.open(base + "runs/" + killedRunID)
	b.sees("#facts", "team/base", "interrupted", "Died in", "blobs", shortOf(f.killed.String()),
		"Deletions started", "true", "Found dead", "not yet: the next collect", "not known")
	b.shoot("run-interrupted")

	rep := f.collected
	b.open(base + "runs/" + rep.RunID)
	b.sees("#facts", "team/app", "done", "1 manifest, ")
	b.sees("#plan", "unreferenced", "tagged", shortOf(rep.BlobsDeleted[0].String()))
	if n := b.count("#plan tr.del"); n != len(rep.ManifestsDeleted)+len(rep.LayersUnlinked)+len(rep.BlobsDeleted) {
		t.Errorf("run page shows %d deletions; the report has %d manifests, %d layer links, %d blobs",
			n, len(rep.ManifestsDeleted), len(rep.LayersUnlinked), len(rep.BlobsDeleted))
	}
	b.shoot("run")
	checkRunFilter(t, b, base, rep)
	checkBlockedDryRun(b, base, f.blocked)

	b.open(base + "repositories")
	b.sees("table.repos", "team/app", "team/base")
	b.sees("#ranked", "Ranked by reclaimable bytes", "team/base", "team/app")
	if first := b.text("table.ranked tbody tr:first-child td.repo"); first != "team/base" {
		t.Errorf("the repository ranked first by reclaimable bytes is %q; want team/base (team/app was just collected)", first)
	}
	b.shoot("repositories")
	b.open(base + "repositories?by=exclusive")
	b.sees("#ranked", "Ranked by exclusive bytes", "team/base", "team/app")
	b.open(base + "repositories")

	checkPreview(t, b, f, base)

	b.open(base + "retention")
	b.sees("table.retention", "team/app", "ready", "keep newest", "older than 365 days")
	// the plan's apply, and the preview that the empty in-use index stopped
	b.sees("table.retention tr.plan-ready", fmt.Sprintf("deleted %s", plural(len(f.applied.Deleted), "tag")))
	b.sees("table.retention tr.plan-aborted", "team/base", "aborted", "inuse_empty", "no plan")
	b.shoot("retention")
}

// TestConsoleShowsHostileInputAsText types a repository name that is
// markup into the preview form: the name is invalid, and the error page
// shows it as text: no element, no script, no dialog.
func TestConsoleShowsHostileInputAsText(t *testing.T) {
	chromium(t)
	f := &fixture{Registry: startRegistry(t)}
	b := newBrowser(t, user, password)
	hostile := `<script>alert("x")</script><img src=x onerror=alert(1)>`
	b.open(f.URL + console.Prefix + "repositories")
	b.run(chromedp.SendKeys(chromedp.CSS("#repository"), hostile),
		chromedp.Click(chromedp.CSS("form.preview-any button")),
		chromedp.WaitVisible(chromedp.CSS("#error")))
	// The error quotes the name as Go does (%q); a person sees those characters.
	b.sees("#error", "400", collector.ErrInvalidName.Error(), fmt.Sprintf("%q", hostile))
	if n := b.count("script"); n != 1 {
		t.Errorf("the error page has %d script elements; want only console.js", n)
	}
	if n := b.count("main img"); n != 0 {
		t.Errorf("the error page has %d img elements: the input was rendered as markup", n)
	}
	b.shoot("hostile-input")
}

// checkRunFilter opens the page of the run rep: deletions first, and the
// filter keeps what it names, on the server.
func checkRunFilter(t *testing.T, b *browser, base string, rep *collector.Report) {
	t.Helper()
	if first := b.text("#plan tbody tr:first-child td:nth-child(3)"); !strings.Contains(first, "delete") {
		t.Errorf("the first object of the run page is a %q; want what was deleted first", first)
	}
	b.open(base + "runs/" + rep.RunID + "?show=kept&reason=tagged")
	if del, keep := b.count("#plan tr.del"), b.count("#plan tr.keep"); del != 0 || keep == 0 {
		t.Errorf("?show=kept&reason=tagged lists %d deleted and %d kept objects; want only kept ones", del, keep)
	}
	b.sees("#plan-count", "match")
	b.sees("#plan", "tagged")
	b.shoot("run-filter-kept-tagged")
	b.open(base + "runs/" + rep.RunID + "?show=errors")
	b.sees("#plan", "No object of this run matches the filter")
}

// checkBlockedDryRun opens the page of a dry run a blocker would have
// refused: it says a real run would be refused, and why; so does the list.
func checkBlockedDryRun(b *browser, base string, blocked *collector.Report) {
	b.t.Helper()
	b.open(base + "runs/" + blocked.RunID)
	b.sees("#blockers", "A real run now would be refused", "blocked (run): redis_recording_too_short until ")
	b.sees("#facts", "dry run", "Would delete", "(nothing was deleted)")
	b.shoot("run-blocked-dry-run")
	b.open(base + "runs")
	b.sees("table.runs", "Would delete", "Would free", "blocked (run): redis_recording_too_short")
}

// checkPreview clicks the preview button of team/base on the repositories
// page: a dry run, rendered as the plan, that deletes nothing.
func checkPreview(t *testing.T, b *browser, f *fixture, base string) {
	t.Helper()
	b.run(chromedp.Click(chromedp.CSS(`form:has(input[value="team/base"]) button`)), chromedp.WaitVisible(chromedp.CSS("#plan")))
	b.sees("h1", "Preview team/base")
	b.sees("#facts", "dry run", "Would delete", "1 manifest, ")
	b.sees("#preview-note", "can delete less or more than listed here")
	b.sees("#plan", "manifest", "delete", "unreferenced", "keep", "tagged")
	if del, keep := b.count("#plan tr.del"), b.count("#plan tr.keep"); del == 0 || keep == 0 {
		t.Errorf("preview of team/base shows %d rows to delete and %d to keep; want both (the untagged old and the tagged latest)", del, keep)
	}
	b.shoot("preview")
	if code := registrytest.ManifestStatus(t, f.Registry, "team/base:latest"); code != http.StatusOK {
		t.Errorf("after the preview, team/base:latest answers %d", code)
	}
	b.open(base + "runs?repository=team/base")
	b.sees("table.runs", "dry run", "done", "aborted")
}

func shortOf(d string) string { return d[:len("sha256:")+12] }

// plural is the console's "1 tag" / "2 tags".
func plural(n int, noun string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, noun)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
