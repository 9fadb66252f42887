// Package console is Reclaim's operator console: server-rendered HTML pages,
// served by the registry itself behind its own access controller, that show
// what GC did, refused and would do. The registry package supplies the data
// (Config); this package only renders it.
//
//	GET  <prefix>                    overview: Redis, link database, reclaimer, recent runs, refusals
//	GET  <prefix>runs                recent runs, interrupted ones included (?status= filters)
//	GET  <prefix>runs/<id>           one run's full report, deletions first (?show=deleted|kept|errors,
//	                                 ?reason=, ?all=1 filter the objects)
//	GET  <prefix>repositories        repositories ranked by reclaimable (or ?by=exclusive) bytes, then the
//	                                 catalog a page at a time (?last=); a preview button on each
//	POST <prefix>preview             a dry-run collect of one repository: every object, decision, reason
//	GET  <prefix>retention           the newest stored retention plans, their applies, aborted previews
//	GET  <prefix>trash               what the trash holds, newest first (?repository=, ?run=, ?plan= filter)
//	POST <prefix>trash/restore       puts back an entry (repository with tag or digest), a run's or a plan's
//	GET  <prefix>static/...          the stylesheet and the auto-refresh script
//
// The templates and static files are embedded (go:embed). Pages work
// without JavaScript; the one script only reloads the overview and the runs
// pages, and makes the digests' copy buttons work. Every response carries a strict Content-Security-Policy: no inline
// script or style, nothing from elsewhere.
package console

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"github.com/reclaim-registry/reclaim/gc/collector"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/reclaim/trashentry"
)

// Prefix is where the registry serves the console.
const Prefix = "/gc/console/"

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// CSP is the Content-Security-Policy of every console response.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// Access is what a page asks of the access controller.
type Access int

// The accesses the console asks for.
const (
	// List: the pages that list repositories and runs (Distribution's
	// catalog access: "registry:catalog:*").
	List Access = iota
	// Pull: one run of the repository; its id in a list.
	Pull
	// Delete: a dry-run preview of the repository, as the GC API's
	// collect asks.
	Delete
	// Authenticated: any valid caller, whatever it may access (repo is
	// ""). Asked first where the next answer would depend on the request
	// (an unknown run, a malformed name), so an anonymous caller gets the
	// challenge, never a 404 or a 400.
	Authenticated
)

// Config is what the registry gives the console. Every function must be set.
type Config struct {
	// Authorize asks the registry's access controller for a on repo (""
	// for List and Authenticated). Its error goes to Deny.
	Authorize func(r *http.Request, repo string, a Access) error
	// Deny answers a refused request (401 with the challenge, or 403).
	Deny func(w http.ResponseWriter, r *http.Request, err error)
	// Overview reads the state the overview shows.
	Overview func(ctx context.Context) Overview
	// Runs are the recent runs, newest first: this instance's and the
	// run records every instance shares (other instances' runs, and runs
	// whose process died: "interrupted"). With an error, the runs it
	// could read (this instance's).
	Runs func(ctx context.Context) ([]*collector.Report, error)
	// Run is one run, by id: this instance's or a shared record. The
	// error is a failure to read the shared records (Redis).
	Run func(ctx context.Context, id string) (*collector.Report, bool, error)
	// Repositories lists up to n repository names after last, in order.
	Repositories func(ctx context.Context, last string, n int) ([]string, error)
	// Validate checks a repository name as the GC API does; its error is
	// shown (as text) on a 400 page.
	Validate func(repo string) error
	// Preview runs a dry-run collect of repo, which Validate accepted and
	// the caller may delete from. A run a precondition refused comes back
	// with its report and the error.
	Preview func(ctx context.Context, repo string) (*collector.Report, error)
	// Ranked returns the usage estimates of the n repositories ranked
	// highest by ("reclaimable" or "exclusive") and how many are ranked.
	// Nil: the console shows no ranking.
	Ranked func(ctx context.Context, by string, n int) ([]reclaim.Usage, int64, error)
	// Retention lists the newest stored retention plans. Nil when
	// retention is off: the page says so.
	Retention func(ctx context.Context) ([]RetentionRow, error)
	// Trash is the trash; nil when it is off (trash.keep is 0): the pages
	// say deletions are final.
	Trash *Trash
}

// Trash is what the console reads of the trash and how it restores.
// Every function must be set.
type Trash struct {
	Keep time.Duration // how long an entry stays restorable
	// List returns every entry, newest first.
	List func(ctx context.Context) ([]trashentry.Entry, error)
	// Held counts the entries and the bytes they hold.
	Held func(ctx context.Context) (entries int, bytes int64, err error)
	// Hits counts the pulls of something in the trash in the last days
	// days, today included.
	Hits func(ctx context.Context, days int) (int64, error)
	// Validate checks a selector as the GC API does; its error is shown
	// on a 400 page.
	Validate func(s RestoreSelector) error
	// Authorize asks for what a restore of s needs, as the GC API's
	// restore does (delete on every repository it writes to); its error
	// goes to Deny.
	Authorize func(r *http.Request, s RestoreSelector) error
	// Restore puts back what s selects: what it did with each entry.
	Restore func(ctx context.Context, s RestoreSelector) ([]Restored, error)
}

// RestoreSelector is what a restore puts back: a repository's tag or
// digest, a GC run's entries, or a retention plan's.
type RestoreSelector struct{ Repo, Tag, Digest, Run, Plan string }

// Restored is what a restore did with one entry.
type Restored struct {
	Entry   trashentry.Entry
	Outcome trashentry.Outcome
	Detail  string
}

// Handler serves the console under Prefix and passes anything else to next.
type Handler struct {
	cfg   Config
	next  http.Handler
	pages map[string]*page
	files http.Handler
}

// New returns the console's handler in front of next.
func New(cfg Config, next http.Handler) *Handler {
	sub, err := fs.Sub(staticFS, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	return &Handler{cfg: cfg, next: next, pages: parsePages(),
		files: http.StripPrefix(Prefix+"static/", http.FileServerFS(sub))}
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.HasPrefix(r.URL.Path, Prefix) && r.URL.Path != strings.TrimSuffix(Prefix, "/") {
		h.next.ServeHTTP(w, r)
		return
	}
	hdr := w.Header()
	hdr.Set("Content-Security-Policy", CSP)
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Referrer-Policy", "same-origin")
	hdr.Set("Cache-Control", "no-store")
	rest := strings.TrimPrefix(r.URL.Path, Prefix)
	if r.URL.Path == strings.TrimSuffix(Prefix, "/") {
		http.Redirect(w, r, Prefix, http.StatusMovedPermanently)
		return
	}
	if strings.HasPrefix(rest, "static/") {
		h.files.ServeHTTP(w, r)
		return
	}
	h.route(w, r, rest)
}

func (h *Handler) route(w http.ResponseWriter, r *http.Request, rest string) {
	post := rest == "preview" || rest == "trash/restore"
	if post && r.Method != http.MethodPost || !post && r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.fail(w, r, http.StatusMethodNotAllowed, fmt.Errorf("%s is not allowed here", r.Method))
		return
	}
	switch {
	case rest == "":
		h.overview(w, r)
	case rest == "runs":
		h.runs(w, r)
	case strings.HasPrefix(rest, "runs/"):
		h.run(w, r, strings.TrimPrefix(rest, "runs/"))
	case rest == "repositories":
		h.repositories(w, r)
	case rest == "preview":
		h.preview(w, r)
	case rest == "trash":
		h.trash(w, r)
	case rest == "trash/restore":
		h.restore(w, r)
	case rest == "retention":
		h.retention(w, r)
	default:
		h.fail(w, r, http.StatusNotFound, errors.New("no such page"))
	}
}

// allowed asks the access controller and answers the refusal itself.
func (h *Handler) allowed(w http.ResponseWriter, r *http.Request, repo string, a Access) bool {
	if err := h.cfg.Authorize(r, repo, a); err != nil {
		h.cfg.Deny(w, r, err)
		return false
	}
	return true
}
