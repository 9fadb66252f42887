package console

import (
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/reclaim/trashentry"
)

// The trash page (trash.keep > 0): what deleters removed and can still be
// put back, and the restore form's outcome.

// trashHitDays is the span of the overview's trash hits.
const trashHitDays = 7

// trashShown is how many entries the trash page lists (the newest).
const trashShown = 500

// trashState is the overview's trash card.
type trashState struct {
	On      bool
	Keep    time.Duration
	Entries int
	Bytes   int64
	Hits    int64
	Error   string
}

func (h *Handler) trashState(r *http.Request) trashState {
	t := h.cfg.Trash
	if t == nil {
		return trashState{}
	}
	st := trashState{On: true, Keep: t.Keep}
	var err error
	if st.Entries, st.Bytes, err = t.Held(r.Context()); err == nil {
		st.Hits, err = t.Hits(r.Context(), trashHitDays)
	}
	if err != nil {
		st.Error = err.Error()
	}
	return st
}

// trashRow is one entry on the trash page.
type trashRow struct {
	trashentry.Entry
	RunID string // Run when the caller may open the run's page, else ""
	// ByTag: the restore button puts back the tag (the newest removal of
	// it: an older one is Superseded, restored by no button); otherwise
	// the repository's digest.
	ByTag, Superseded bool
}

// trashGroup is one run's or one plan's entries, restored together.
type trashGroup struct {
	Run, Plan, Repository string
	Entries               int
	Bytes                 int64
	Removed, Expires      time.Time // the newest removal, the first expiry
}

// trashData is the trash page's.
type trashData struct {
	On              bool
	Keep            time.Duration
	Repository, Run string // the filter
	Plan            string
	Rows            []trashRow
	Groups          []trashGroup
	Total           int
	Bytes           int64
	Error           string
	Restore         *restoreView // after a restore
}

// restoreView is a restore's outcome, entry by entry.
type restoreView struct {
	Rows           []restoredRow
	Restored, Left int
}

// restoredRow is one entry a restore looked at, in an operator's words.
type restoredRow struct {
	trashentry.Entry
	Outcome       trashentry.Outcome
	Words, Detail string
	OK            bool
}

// outcomeWords says what a restore did with an entry, for an operator.
var outcomeWords = map[trashentry.Outcome]string{
	trashentry.Restored:     "restored",
	trashentry.AlreadyThere: "already there (pushed again since)",
	trashentry.TagMoved:     "tag moved: left alone",
	trashentry.Purged:       "purged: data gone",
	trashentry.NotLinkable:  "not put back: a blob no repository linked (restoring what linked it puts it back in use)",
	trashentry.Failed:       "failed",
}

func (h *Handler) trash(w http.ResponseWriter, r *http.Request) {
	if !h.allowed(w, r, "", List) {
		return
	}
	q := r.URL.Query()
	d := trashData{Repository: q.Get("repository"), Run: q.Get("run"), Plan: q.Get("plan")}
	h.fillTrash(r, &d)
	h.render(w, http.StatusOK, "trash", view{Title: "Trash", Nav: "trash", Data: d})
}

// fillTrash lists the entries d's filter selects, newest first.
func (h *Handler) fillTrash(r *http.Request, d *trashData) {
	t := h.cfg.Trash
	if t == nil {
		return
	}
	d.On, d.Keep = true, t.Keep
	all, err := t.List(r.Context())
	if err != nil {
		d.Error = err.Error()
	}
	pull := h.pullable(r)
	newestTag := map[[2]string]bool{}
	groups := map[[2]string]int{}
	for _, e := range all {
		if d.Repository != "" && e.Repo != d.Repository || d.Run != "" && e.Run != d.Run || d.Plan != "" && e.Plan != d.Plan {
			continue
		}
		d.Total++
		d.Bytes += e.Size
		row := trashRow{Entry: e, ByTag: e.Kind == reclaim.KindTag}
		if e.Run != "" {
			row.RunID = pull(e.Repo, e.Run)
		}
		if row.ByTag {
			k := [2]string{e.Repo, e.Tag}
			row.Superseded = newestTag[k] // List is newest first
			newestTag[k] = true
		}
		if e.Plan != "" || row.RunID != "" {
			d.addToGroup(groups, row)
		}
		if len(d.Rows) < trashShown {
			d.Rows = append(d.Rows, row)
		}
	}
}

// addToGroup counts row into its run's or plan's group.
func (d *trashData) addToGroup(groups map[[2]string]int, row trashRow) {
	k := [2]string{row.RunID, row.Plan}
	i, ok := groups[k]
	if !ok {
		i = len(d.Groups)
		groups[k] = i
		d.Groups = append(d.Groups, trashGroup{Run: row.RunID, Plan: row.Plan, Repository: row.Repo,
			Removed: row.Removed, Expires: row.Expires})
	}
	g := &d.Groups[i]
	g.Entries++
	g.Bytes += row.Size
	if row.Expires.Before(g.Expires) {
		g.Expires = row.Expires
	}
	if g.Repository != row.Repo {
		g.Repository = "" // a plan or run of several repositories: listed per entry
	}
}

func (h *Handler) restore(w http.ResponseWriter, r *http.Request) {
	if !h.postForm(w, r, "a restore") {
		return
	}
	t := h.cfg.Trash
	if t == nil {
		h.fail(w, r, http.StatusNotFound, errors.New("trash off: deletions are final, nothing can be restored"))
		return
	}
	f := r.PostForm
	sel := RestoreSelector{Repo: f.Get("repository"), Tag: f.Get("tag"), Digest: f.Get("digest"), Run: f.Get("run"), Plan: f.Get("plan")}
	if err := t.Validate(sel); err != nil {
		h.fail(w, r, http.StatusBadRequest, err)
		return
	}
	if err := t.Authorize(r, sel); err != nil {
		h.cfg.Deny(w, r, err)
		return
	}
	done, err := t.Restore(r.Context(), sel)
	if err != nil {
		h.fail(w, r, http.StatusServiceUnavailable, err)
		return
	}
	v := &restoreView{}
	for _, e := range done {
		row := restoredRow{Entry: e.Entry, Outcome: e.Outcome, Detail: e.Detail}
		row.Words, row.OK = outcomeWords[e.Outcome], e.Outcome.Back()
		if row.Words == "" {
			row.Words = e.Outcome.String()
		}
		if row.OK {
			v.Restored++
		} else {
			v.Left++
		}
		v.Rows = append(v.Rows, row)
	}
	// the restored entries in the order the trash lists them: newest first
	slices.SortStableFunc(v.Rows, func(a, b restoredRow) int { return b.Removed.Compare(a.Removed) })
	d := trashData{Restore: v}
	h.fillTrash(r, &d)
	h.render(w, http.StatusOK, "trash", view{Title: "Trash", Nav: "trash", Data: d})
}
