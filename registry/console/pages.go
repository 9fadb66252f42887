package console

import (
	"bytes"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/gc/collector"
	"github.com/reclaim-registry/reclaim/internal/crosssite"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/reclaim/gcrun"
)

// page is one page's template set: the layout and the page's content.
type page struct{ t *template.Template }

var pageNames = []string{"overview", "runs", "run", "repositories", "preview", "retention", "trash", "error"}

func parsePages() map[string]*page {
	out := map[string]*page{}
	for _, n := range pageNames {
		t := template.Must(template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+n+".html"))
		out[n] = &page{t: t}
	}
	return out
}

// view is what the layout gets: the page's own data in Data.
type view struct {
	Title   string
	Nav     string // the active menu entry
	Refresh int    // seconds between automatic reloads; 0: none
	Prefix  string
	Now     time.Time
	Data    any
}

// render executes the page into a buffer first, so a template error is a
// clean 500 rather than half a page.
func (h *Handler) render(w http.ResponseWriter, status int, name string, v view) {
	v.Prefix, v.Now = Prefix, time.Now()
	var buf bytes.Buffer
	if err := h.pages[name].t.ExecuteTemplate(&buf, "layout.html", v); err != nil {
		http.Error(w, "console: render "+name+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

func (h *Handler) fail(w http.ResponseWriter, _ *http.Request, status int, err error) {
	h.render(w, status, "error", view{Title: http.StatusText(status), Data: map[string]any{"Status": status, "Message": err.Error()}})
}

// overviewData is the overview page's.
type overviewData struct {
	Overview
	Recent   []runRow
	Refusals []runRow
	Hour     totals
	Day      totals
	Running  int
	Ranking  ranking
	Trash    trashState
}

// overviewTop is how many ranked repositories the overview's card shows.
const overviewTop = 5

// ranked reads the ranking by by, when the registry gives one.
func (h *Handler) ranked(r *http.Request, by string, n int) ranking {
	if h.cfg.Ranked == nil {
		return ranking{}
	}
	rows, total, err := h.cfg.Ranked(r.Context(), by, n)
	return rankingOf(rows, total, by, err)
}

func (h *Handler) overview(w http.ResponseWriter, r *http.Request) {
	if !h.allowed(w, r, "", List) {
		return
	}
	runs, err := h.cfg.Runs(r.Context())
	now := time.Now()
	d := overviewData{Overview: h.cfg.Overview(r.Context()), Hour: sumSince(runs, now.Add(-time.Hour)),
		Day: sumSince(runs, now.Add(-24*time.Hour)), Ranking: h.ranked(r, "reclaimable", overviewTop), Trash: h.trashState(r)}
	if err != nil {
		d.Notes = append(d.Notes, runsNote(err))
	}
	pull := h.pullable(r)
	for _, rep := range runs {
		row := rowOf(rep)
		row.ID = pull(row.Repository, row.ID)
		if rep.Status == gcrun.StatusRunning {
			d.Running++
		}
		if len(d.Recent) < 10 {
			d.Recent = append(d.Recent, row)
		}
		if row.refused() && len(d.Refusals) < 10 {
			d.Refusals = append(d.Refusals, row)
		}
	}
	h.render(w, http.StatusOK, "overview", view{Title: "Overview", Nav: "overview", Refresh: 30, Data: d})
}

func (h *Handler) runs(w http.ResponseWriter, r *http.Request) {
	if !h.allowed(w, r, "", List) {
		return
	}
	status, repo := r.URL.Query().Get("status"), r.URL.Query().Get("repository")
	var rows []runRow
	runs, err := h.cfg.Runs(r.Context())
	note := ""
	if err != nil {
		note = runsNote(err)
	}
	pull := h.pullable(r)
	for _, rep := range runs {
		row := rowOf(rep)
		if repo != "" && row.Repository != repo {
			continue
		}
		row.ID = pull(row.Repository, row.ID)
		if status == "" || string(row.Status) == status || status == statusRefused && row.refused() {
			rows = append(rows, row)
		}
	}
	h.render(w, http.StatusOK, "runs", view{Title: "Runs", Nav: "runs", Refresh: 30,
		Data: map[string]any{"Rows": rows, "Status": status, "Repository": repo, "Note": note,
			"Statuses": statusFilters()}})
}

// statusRefused filters the runs list to the runs that need a look
// (runRow.refused); it is the console's, not a run status.
const statusRefused = "refused"

// statusFilters are the choices of the runs list's status filter: every run
// status, then statusRefused.
func statusFilters() []string {
	var out []string
	for _, s := range gcrun.Statuses() {
		out = append(out, string(s))
	}
	return append(out, statusRefused)
}

// pullable returns the id a list may show for a run: its own when the
// caller may pull the run's repository, else "" (listed without a link).
// The lists need only the catalog access, and a run's page pull on its
// repository, so run ids are never shown to a caller who could not open
// them: ids cannot be listed or probed. One question per repository.
func (h *Handler) pullable(r *http.Request) func(repo, id string) string {
	may := map[string]bool{}
	return func(repo, id string) string {
		ok, asked := may[repo]
		if !asked {
			ok = h.cfg.Authorize(r, repo, Pull) == nil
			may[repo] = ok
		}
		if !ok {
			return ""
		}
		return id
	}
}

// runsNote says why a run list holds only this instance's runs.
func runsNote(err error) string {
	return "Only this instance's runs are listed: the run records all instances share could not be read (" + err.Error() + ")."
}

// runData is a run's report as the run and preview pages show it.
type runData struct {
	Row     runRow
	Report  *collector.Report
	Rows    []planRow // the rows shown: deletions first, filtered, at most rowsShown unless All
	Reasons []reasonCount
	Errors  []planRow
	Changed []planRow
	Refusal string // the error that refused a preview
	// The run page's filter (query parameters show, reason and all) and
	// what it left: Total objects, Matched by the filter, of which Rows.
	Show, Reason   string
	All            bool
	Total, Matched int
	Filterable     bool // the run's page (a preview is a POST: no filter links)
}

// choice is one option of a select.
type choice struct{ Value, Label string }

// ShowChoices are the filter's "show" options.
func (d runData) ShowChoices() []choice {
	return []choice{{"", "every object"}, {showDeleted, d.verb()}, {showKept, "kept"}, {showErrors, "errors"}}
}

func (d runData) verb() string {
	if d.Row.DryRun {
		return "would delete"
	}
	return "deleted"
}

// Filtered is whether the filter leaves out anything.
func (d runData) Filtered() bool { return d.Show != "" || d.Reason != "" }

// ReasonURL is the run's page filtered to one reason.
func (d runData) ReasonURL(reason string) string {
	return d.url(url.Values{"reason": {reason}})
}

// FilterURL is the run's page with the current filter and flag ("all") set.
func (d runData) FilterURL(flag string) string {
	q := url.Values{flag: {"1"}}
	if d.Show != "" {
		q.Set("show", d.Show)
	}
	if d.Reason != "" {
		q.Set("reason", d.Reason)
	}
	return d.url(q)
}

func (d runData) url(q url.Values) string {
	return Prefix + "runs/" + url.PathEscape(d.Row.ID) + "?" + q.Encode()
}

// The run page's filter: ?show= one of these ("" is every object), and
// ?reason= one reason.
const (
	showDeleted = "deleted"
	showKept    = "kept"
	showErrors  = "errors"
)

// reasonListed is the reason the run page gives a deletion it knows only
// from a report's lists.
const reasonListed = "deleted"

// rowsShown is how many objects a run's page lists unless ?all=1: a run of
// thousands of objects stays readable, and the filter finds the rest.
const rowsShown = 500

func runDataOf(rep *collector.Report) runData {
	rows := planRowsSorted(rep)
	d := runData{Row: rowOf(rep), Report: rep, Rows: rows, Reasons: countReasons(rows),
		Errors: planRows(rep.Errors), Changed: planRows(rep.Changed), Total: len(rows), Matched: len(rows)}
	d.Rows = d.Rows[:min(len(d.Rows), rowsShown)]
	return d
}

// planRowsSorted is every decision of rep, what was (or would be) deleted
// first, in the run's order within each. A report read from the shared run
// records (another instance's run) carries its lists, not its decisions:
// its deletions are listed from them, as "deleted".
func planRowsSorted(rep *collector.Report) []planRow {
	rows := planRows(rep.Decisions())
	if len(rows) == 0 {
		for _, l := range []struct {
			kind reclaim.ObjectKind
			ds   []digest.Digest
		}{{reclaim.KindManifest, rep.ManifestsDeleted}, {reclaim.KindLayerLink, rep.LayersUnlinked}, {reclaim.KindBlob, rep.BlobsDeleted}} {
			for _, d := range l.ds {
				rows = append(rows, planRow{Kind: string(l.kind), Digest: d, Deletes: true, Reason: reasonListed,
					Message: "in the report's deleted lists (the run's own reason is kept by the instance that ran it)"})
			}
		}
		rows = append(rows, planRows(rep.Kept)...)
	}
	slices.SortStableFunc(rows, func(a, b planRow) int {
		switch {
		case a.Deletes == b.Deletes:
			return 0
		case a.Deletes:
			return -1
		}
		return 1
	})
	return rows
}

// filter keeps the rows that show and reason select, at most rowsShown
// unless all.
func (d *runData) filter(rep *collector.Report, show, reason string, all bool) {
	d.Show, d.Reason, d.All = show, reason, all
	errs := map[string]bool{reclaim.ReasonDeleteFailed.String(): true, reclaim.ReasonCheckFailed.String(): true}
	var out []planRow
	for _, r := range planRowsSorted(rep) {
		switch {
		case show == showDeleted && !r.Deletes, show == showKept && r.Deletes,
			show == showErrors && !errs[r.Reason], reason != "" && r.Reason != reason:
			continue
		}
		out = append(out, r)
	}
	d.Matched = len(out)
	if !all {
		out = out[:min(len(out), rowsShown)]
	}
	d.Rows = out
}

func (h *Handler) run(w http.ResponseWriter, r *http.Request, id string) {
	// pull on the run's repository, as GET /gc/v1/runs/<id>: not the
	// catalog access of the lists
	if !h.allowed(w, r, "", Authenticated) {
		return
	}
	rep, ok, err := h.cfg.Run(r.Context(), id)
	if err != nil {
		h.fail(w, r, http.StatusServiceUnavailable, fmt.Errorf("the run records all instances share could not be read: %w", err))
		return
	}
	// A run of a repository the caller may not pull answers as an unknown
	// id does (as GET /gc/v1/runs/<id>), so ids cannot be probed.
	if !ok || h.cfg.Authorize(r, rep.Repository, Pull) != nil {
		h.fail(w, r, http.StatusNotFound, errors.New("run not found or expired (runs are remembered for 24 hours)"))
		return
	}
	d := runDataOf(rep)
	q := r.URL.Query()
	d.Filterable = true
	d.filter(rep, q.Get("show"), q.Get("reason"), q.Get("all") != "")
	h.render(w, http.StatusOK, "run", view{Title: "Run " + id, Nav: "runs", Data: d})
}

// pageSize is how many repositories one page lists.
const pageSize = 100

func (h *Handler) repositories(w http.ResponseWriter, r *http.Request) {
	if !h.allowed(w, r, "", List) {
		return
	}
	last, by := r.URL.Query().Get("last"), r.URL.Query().Get("by")
	if by != "exclusive" {
		by = "reclaimable"
	}
	names, err := h.cfg.Repositories(r.Context(), last, pageSize+1)
	if err != nil {
		h.fail(w, r, http.StatusServiceUnavailable, err)
		return
	}
	next := ""
	if len(names) > pageSize {
		names = names[:pageSize]
		next = names[pageSize-1]
	}
	h.render(w, http.StatusOK, "repositories", view{Title: "Repositories", Nav: "repositories",
		Data: map[string]any{"Names": names, "Last": last, "Next": next, "Ranking": h.ranked(r, by, pageSize)}})
}

// postForm admits a console POST (what: "a preview", "a restore"): the
// browser sends the registry's credentials with a POST another site's
// page makes, so it must come from the console's own pages; then its
// small form is read, and the caller must be authenticated (an anonymous
// caller gets the challenge, not a verdict on what it sent). false: the
// answer is written.
func (h *Handler) postForm(w http.ResponseWriter, r *http.Request, what string) bool {
	if err := crosssite.Origin(r); err != nil {
		h.fail(w, r, http.StatusForbidden, fmt.Errorf("%s must be asked for from the console's own pages (%v)", what, err))
		return false
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4096)
	if err := r.ParseForm(); err != nil {
		h.fail(w, r, http.StatusBadRequest, err)
		return false
	}
	return h.allowed(w, r, "", Authenticated)
}

func (h *Handler) preview(w http.ResponseWriter, r *http.Request) {
	if !h.postForm(w, r, "a preview") {
		return
	}
	repo := r.PostForm.Get("repository")
	if err := h.cfg.Validate(repo); err != nil {
		h.fail(w, r, http.StatusBadRequest, err)
		return
	}
	if !h.allowed(w, r, repo, Delete) {
		return
	}
	rep, err := h.cfg.Preview(r.Context(), repo)
	if rep == nil {
		status := http.StatusServiceUnavailable
		if errors.Is(err, collector.ErrRepositoryNotFound) {
			status = http.StatusNotFound
		}
		h.fail(w, r, status, err)
		return
	}
	d := runDataOf(rep)
	status := http.StatusOK
	if err != nil {
		d.Refusal, status = err.Error(), http.StatusServiceUnavailable
	}
	h.render(w, status, "preview", view{Title: "Preview " + repo, Nav: "repositories", Data: d})
}

func (h *Handler) retention(w http.ResponseWriter, r *http.Request) {
	if !h.allowed(w, r, "", List) {
		return
	}
	d := map[string]any{"Available": h.cfg.Retention != nil}
	if h.cfg.Retention != nil {
		rows, err := h.cfg.Retention(r.Context())
		// plans and aborted previews, newest first
		slices.SortStableFunc(rows, func(a, b RetentionRow) int { return b.Updated.Compare(a.Updated) })
		d["Rows"], d["Error"] = rows, err
	}
	h.render(w, http.StatusOK, "retention", view{Title: "Retention", Nav: "retention", Data: d})
}
