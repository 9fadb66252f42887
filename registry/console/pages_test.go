package console

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/gc"
	"github.com/reclaim-registry/reclaim/gc/collector"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/reclaim/gcrun"
)

// pagesFixture is a console on made-up data (no registry, no Redis): a
// blocked dry run, a real run of 5,000 objects, an aborted run, retention
// plans with their applies and an aborted preview, and the reclaimer off.
type pagesFixture struct {
	srv              *httptest.Server
	h                *Handler
	dry, big, abort  *collector.Report
	reclaimerEnabled bool
	estimatesOff     string // with the reclaimer on: why it makes no estimates
}

func dg(s string) digest.Digest { return digest.FromString(s) }

func newPagesFixture(t *testing.T) *pagesFixture {
	t.Helper()
	now := time.Now().UTC()
	until := now.Add(90 * time.Second)
	f := &pagesFixture{}
	f.dry = &collector.Report{RunID: "01dryrunblocked", Repository: "team/base", DryRun: true, Status: gcrun.StatusDone,
		StartedAt: now.Add(-time.Minute), FinishedAt: now.Add(-time.Minute + 20*time.Millisecond),
		ManifestsDeleted: []digest.Digest{dg("m-old")}, BytesFreed: 1536,
		Blockers: []collector.Blocker{{Reason: reclaim.AbortRedisRecordingTooShort, Blocks: collector.BlocksRun,
			Detail: "Redis has recorded for 10s of a 2m window", Until: &until}}}
	f.big = &collector.Report{RunID: "01bigrealrun", Repository: "team/app", Status: gcrun.StatusDone,
		StartedAt: now.Add(-2 * time.Minute), FinishedAt: now.Add(-time.Minute), BytesFreed: 5 << 20}
	// kept first in the report, deletions after: the page lists deletions first
	for i := range 3000 {
		f.big.Kept = append(f.big.Kept, gc.Decision{Kind: reclaim.KindBlob, Digest: dg(fmt.Sprint("kept", i)), Reason: reclaim.ReasonTagged})
	}
	for i := range 1990 {
		f.big.BlobsDeleted = append(f.big.BlobsDeleted, dg(fmt.Sprint("del", i)))
	}
	f.big.ManifestsDeleted = []digest.Digest{dg("m1")}
	for i := range 9 {
		e := gc.Decision{Kind: reclaim.KindBlob, Digest: dg(fmt.Sprint("err", i)), Reason: reclaim.ReasonDeleteFailed, Detail: "storage said no"}
		f.big.Kept, f.big.Errors = append(f.big.Kept, e), append(f.big.Errors, e)
	}
	f.abort = &collector.Report{RunID: "01abortedrun", Repository: "team/base", Status: gcrun.StatusAborted,
		Abort: string(reclaim.AbortRedisRecordingTooShort), StartedAt: now.Add(-3 * time.Minute), FinishedAt: now.Add(-3 * time.Minute)}
	runs := []*collector.Report{f.dry, f.big, f.abort}
	h := New(Config{
		Authorize: func(*http.Request, string, Access) error { return nil },
		Deny: func(w http.ResponseWriter, _ *http.Request, err error) {
			http.Error(w, err.Error(), http.StatusForbidden)
		},
		Overview: func(context.Context) Overview {
			o := Overview{GCEnabled: true, ReclaimerNote: "reclaimer.enabled is false: blobs queued for review are not deleted", EstimatesOff: "reclaimer.enabled is false"}
			o.Reclaimer.Enabled = f.reclaimerEnabled
			if f.reclaimerEnabled {
				o.ReclaimerNote, o.EstimatesOff = "", f.estimatesOff
			}
			return o
		},
		Runs: func(context.Context) ([]*collector.Report, error) { return runs, nil },
		Run: func(_ context.Context, id string) (*collector.Report, bool, error) {
			for _, r := range runs {
				if r.RunID == id {
					return r, true, nil
				}
			}
			return nil, false, nil
		},
		Repositories: func(context.Context, string, int) ([]string, error) { return []string{"team/app", "team/base"}, nil },
		Validate:     func(string) error { return nil },
		Preview:      func(context.Context, string) (*collector.Report, error) { return f.dry, nil },
		Ranked: func(context.Context, string, int) ([]reclaim.Usage, int64, error) {
			return []reclaim.Usage{{Repository: "team/base", ReclaimableBytes: 4096, ComputedAt: now.Add(-3 * time.Hour)}}, 1, nil
		},
		Retention: func(context.Context) ([]RetentionRow, error) {
			return []RetentionRow{
				{ID: "0123456789abcdef01234567", Repository: "team/app", Status: "ready", Keep: 1, Delete: 3, Updated: now.Add(-time.Hour),
					Applies: []RetentionApply{{Started: now.Add(-30 * time.Minute), Deleted: 1, Left: []string{"in_use", "in_use"}}}},
				{ID: "89abcdef0123456789abcdef", Repository: "team/web", Status: "ready", Keep: 2, Delete: 1, Updated: now.Add(-2 * time.Hour)},
				{ID: "456789abcdef0123456789ab", Repository: "team/api", Status: "ready", Keep: 2, Delete: 2, Updated: now.Add(-3 * time.Hour),
					Applies: []RetentionApply{{Started: now.Add(-2 * time.Hour), Deleted: 2, IndexNote: "the in-use index changed since this plan: versions that became in use during apply protect only themselves"}}},
				{Repository: "team/db", Status: "aborted", Updated: now.Add(-10 * time.Minute), Skip: "inuse_empty: no source declares any image"},
			}, nil
		},
	}, http.NotFoundHandler())
	f.h, f.srv = h, httptest.NewServer(h)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *pagesFixture) get(t *testing.T, path string) string {
	t.Helper()
	return f.do(t, http.MethodGet, path, nil)
}

func (f *pagesFixture) do(t *testing.T, method, path string, body io.Reader) string {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, f.srv.URL+Prefix+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	code, b := roundTrip(t, req)
	if code != http.StatusOK {
		t.Fatalf("%s %s: %d\n%s", method, path, code, b)
	}
	return string(b)
}

var tagRe = regexp.MustCompile(`<[^>]*>`)

// text is html without its tags, spaces collapsed: roughly what a person reads.
func text(html string) string {
	return strings.Join(strings.Fields(tagRe.ReplaceAllString(strings.ReplaceAll(html, "&#43;", "+"), " ")), " ")
}

// trOf is the html of the table row that holds marker.
func trOf(t *testing.T, page, marker string) string {
	t.Helper()
	i := strings.Index(page, marker)
	if i < 0 {
		t.Fatalf("no row holds %s", marker)
	}
	start := strings.LastIndex(page[:i], "<tr")
	return page[start : i+strings.Index(page[i:], "</tr>")]
}

// rowOfRun is the html of the runs table's row of run id.
func rowOfRun(t *testing.T, page, id string) string {
	t.Helper()
	return trOf(t, page, "runs/"+id+`"`)
}

// cell is the text of the cell labelled label in a table row's html.
func cell(t *testing.T, rowHTML, label string) string {
	t.Helper()
	m := regexp.MustCompile(`data-label="` + label + `">(.*?)</td>`).FindStringSubmatch(rowHTML)
	if m == nil {
		t.Fatalf("no cell %q in %s", label, rowHTML)
	}
	return text(m[1])
}

// A blocked dry run shows its blocker, reason and until when, in the lists
// and on its page, as prominently as an aborted run its refusal; it is
// listed among the refusals and never under Deleted/Freed.
func TestBlockedDryRunShowsItsBlocker(t *testing.T) {
	f := newPagesFixture(t)
	until := f.dry.Blockers[0].Until.UTC().Format("2006-01-02 15:04:05Z")
	want := "blocked (run): redis_recording_too_short until " + until + ": Redis has recorded for 10s of a 2m window"
	for _, path := range []string{"", "runs", "runs?status=refused"} {
		page := f.get(t, path)
		h := rowOfRun(t, page, f.dry.RunID)
		row := text(h)
		if !strings.Contains(row, want) || !strings.Contains(row, "dry run blocked") {
			t.Errorf("%q: the dry run's row does not show its blocker %q:\n%s", path, want, row)
		}
		if got := cell(t, h, "Deleted"); got != "" {
			t.Errorf("%q: the dry run's Deleted cell reads %q; want empty", path, got)
		}
		if got := cell(t, h, "Freed"); got != "" {
			t.Errorf("%q: the dry run's Freed cell reads %q; want empty", path, got)
		}
		if got := cell(t, h, "Would delete"); got != "1 manifest, 0 layer links, 0 blobs" {
			t.Errorf("%q: the dry run's Would delete cell reads %q", path, got)
		}
		if got := cell(t, h, "Would free"); got != "1.5 KiB" {
			t.Errorf("%q: the dry run's Would free cell reads %q", path, got)
		}
		if !strings.HasPrefix(path, "runs?status") {
			big := rowOfRun(t, page, f.big.RunID)
			if got := cell(t, big, "Deleted"); got != "1 manifest, 0 layer links, 1990 blobs" {
				t.Errorf("%q: the real run's Deleted cell reads %q", path, got)
			}
			if got := cell(t, big, "Would delete"); got != "" {
				t.Errorf("%q: the real run's Would delete cell reads %q", path, got)
			}
		}
	}
	over := text(f.get(t, ""))
	if strings.Contains(over, "1 manifests") {
		t.Errorf("the overview says \"1 manifests\"")
	}
	// the Collects card sums the one real run, not the dry run
	if !strings.Contains(over, "Deleted, last hour "+plural(1+1990, "object")) || !strings.Contains(over, "1 collect ") {
		t.Errorf("the Collects card does not sum only the real run:\n%.3000s", over)
	}
	for _, path := range []string{"runs/" + f.dry.RunID} {
		page := f.get(t, path)
		m := regexp.MustCompile(`(?s)<div class="note bad" id="blockers">(.*?)</div>`).FindStringSubmatch(page)
		if m == nil || !strings.Contains(text(m[1]), "A real run now would be refused") || !strings.Contains(text(m[1]), want) {
			t.Errorf("%s has no blockers note with %q:\n%.2000s", path, want, text(page))
		}
		if !strings.Contains(text(page), "Would delete 1 manifest, 0 layer links, 0 blobs (nothing was deleted)") {
			t.Errorf("%s: %.2000s", path, text(page))
		}
	}
	// the preview says the same, and no longer promises "less or equal"
	page := f.do(t, http.MethodPost, "preview", strings.NewReader("repository=team/base"))
	if !strings.Contains(text(page), want) || strings.Contains(page, "less or equal") ||
		!strings.Contains(text(page), "it can delete less or more than listed here") {
		t.Errorf("preview:\n%.2000s", text(page))
	}
}

// A run's page lists deletions first, at most rowsShown, and filters by
// decision, reason and errors on the server.
func TestRunPageFilter(t *testing.T) {
	f := newPagesFixture(t)
	rowRe := regexp.MustCompile(`<tr class="(del|keep)">`)
	reasons := func(page string) []string {
		var out []string
		sec := page[strings.Index(page, `<section id="plan">`):]
		for _, m := range regexp.MustCompile(`<span class="reason">([^<]+)</span>`).FindAllStringSubmatch(sec, -1) {
			out = append(out, m[1])
		}
		return out
	}
	plan := func(page string) string { return page[strings.Index(page, `<section id="plan">`):] }
	page := f.get(t, "runs/"+f.big.RunID)
	rows := rowRe.FindAllStringSubmatch(plan(page), -1)
	if len(rows) != rowsShown {
		t.Fatalf("the page lists %d objects; want the first %d", len(rows), rowsShown)
	}
	for i, m := range rows {
		if m[1] != "del" {
			t.Fatalf("row %d is kept, before the deletions' end: deletions are not first", i)
		}
	}
	if !strings.Contains(text(page), "5000 objects, deletions first; the first 500 are listed ( list all 5000 )") {
		t.Errorf("the page does not say it lists 500 of 5000:\n%.600s", text(plan(page)))
	}
	for _, c := range []struct {
		query, reason string
		n             int
	}{
		{"show=kept&reason=tagged", "tagged", 500},
		{"show=kept&reason=tagged&all=1", "tagged", 3000},
		{"show=errors", "delete_failed", 9},
		{"show=deleted&all=1", "deleted", 1991},
		{"reason=delete_failed", "delete_failed", 9},
	} {
		page := f.get(t, "runs/"+f.big.RunID+"?"+c.query)
		got := reasons(page)
		if len(got) != c.n {
			t.Errorf("?%s lists %d objects; want %d", c.query, len(got), c.n)
		}
		for _, r := range got {
			if r != c.reason {
				t.Errorf("?%s lists an object kept for %q", c.query, r)
				break
			}
		}
	}
	page = f.get(t, "runs/"+f.big.RunID+"?show=errors")
	if !strings.Contains(text(page), "9 of 5000 objects match") || !strings.Contains(page, `<option value="errors" selected>`) {
		t.Errorf("?show=errors: %.600s", text(plan(page)))
	}
	if !strings.Contains(page, `href="/gc/console/runs/01bigrealrun?reason=tagged"`) {
		t.Errorf("the reason counts do not link the filter")
	}
	if !strings.Contains(page, `class="copy" data-copy="`+f.big.Errors[0].Digest.String()+`"`) {
		t.Errorf("no copy button with the full digest")
	}
}

// The retention page shows each plan's applies (when, deleted, left and
// why), plans never applied, and aborted previews with their reason.
func TestRetentionPageShowsApplies(t *testing.T) {
	f := newPagesFixture(t)
	page := f.get(t, "retention")
	row := func(repo string) string { return text(trOf(t, page, `data-label="Repository">`+repo+`<`)) }
	if got := row("team/app"); !strings.Contains(got, "deleted 1 tag, left 2 · in_use: 2") || !strings.Contains(got, "1 version 3 tags") {
		t.Errorf("team/app's plan: %s", got)
	}
	if got := row("team/web"); !strings.Contains(got, "not applied") || !strings.Contains(got, "1 tag") || strings.Contains(got, "index changed") {
		t.Errorf("team/web's plan: %s", got)
	}
	if got := row("team/api"); !strings.Contains(got, "deleted 2 tags the in-use index changed since this plan: versions that became in use during apply protect only themselves") {
		t.Errorf("team/api's apply under a changed index: %s", got)
	}
	if got := row("team/db"); !strings.Contains(got, "aborted inuse_empty: no source declares any image") || !strings.Contains(got, "no plan") {
		t.Errorf("team/db's aborted preview: %s", got)
	}
	// newest first: the aborted preview (10 min ago) before the plans
	if strings.Index(page, "team/db") > strings.Index(page, "team/app") {
		t.Errorf("the aborted preview is not listed first (newest first)")
	}
}

// The Reclaimable card says the estimates are off when the reclaimer that
// makes them is off or refreshes none, and shows them as the ranking
// otherwise.
func TestReclaimableCardWhenReclaimerOff(t *testing.T) {
	f := newPagesFixture(t)
	card := func() string {
		page := f.get(t, "")
		i := strings.Index(page, `id="card-reclaimable"`)
		return text(page[i:][:strings.Index(page[i:], "</div>")])
	}
	if got := card(); !strings.Contains(got, "estimates are off") || !strings.Contains(got, "reclaimer.enabled is false") ||
		!strings.Contains(got, "team/base 4.0 KiB, 3h0m0s ago") {
		t.Errorf("reclaimer off: %s", got)
	}
	f.reclaimerEnabled = true
	if got := card(); strings.Contains(got, "estimates are off") || !strings.Contains(got, "of 1 ranked repository") {
		t.Errorf("reclaimer on: %s", got)
	}
	// on, but configured to refresh none: the estimates are off all the same
	f.estimatesOff = "reclaimer.usagerefresh is 0"
	if got := card(); !strings.Contains(got, "estimates are off") || !strings.Contains(got, "reclaimer.usagerefresh is 0") ||
		!strings.Contains(got, "team/base 4.0 KiB, 3h0m0s ago") {
		t.Errorf("reclaimer on, usagerefresh 0: %s", got)
	}
}

func TestPlural(t *testing.T) {
	for _, c := range []struct {
		n    any
		noun string
		want string
	}{{1, "tag", "1 tag"}, {0, "tag", "0 tags"}, {int64(2), "blob", "2 blobs"}, {1, "repository", "1 repository"},
		{3, "ranked repository", "3 ranked repositories"}, {1, "layer link", "1 layer link"}} {
		if got := plural(c.n, c.noun); got != c.want {
			t.Errorf("plural(%v, %q) = %q, want %q", c.n, c.noun, got, c.want)
		}
	}
}

// roundTrip sends req and returns the status and the whole body.
func roundTrip(t *testing.T, req *http.Request) (int, []byte) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}
