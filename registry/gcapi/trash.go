package gcapi

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/reclaim/trashentry"
	"github.com/reclaim-registry/reclaim/trash"
)

// The trash endpoints (docs/api.md, "Trash"). Listing one repository's
// entries needs pull on it, all of them the catalog scope; a restore needs
// delete on every repository it touches (the scope of the deletion it
// undoes); a purge frees space for good across repositories and needs
// registry:trash:purge.
const (
	trashResource    = "trash"
	trashPurgeAction = "purge"
	// maxTrashList bounds one listing's entries (the newest).
	maxTrashList = 1000
	// maxPurge bounds one purge request.
	maxPurge = 10000
)

// errTrashOff answers the trash endpoints while trash.keep is 0.
var errTrashOff = codeUnsupported.err("the trash is off: set trash.keep in the reclaim storage middleware options")

func (h *API) trashBin() (*trash.Bin, error) {
	if h.backend.Trash == nil {
		return nil, errTrashOff
	}
	return h.backend.Trash, nil
}

// trashSelector reads repository, tag, digest, run, plan (and since,
// until for a listing) from the query.
func trashQuery(r *http.Request, known ...string) (trash.Filter, map[string]string, error) {
	q, err := strictQuery(r.URL.RawQuery, func(k string) bool { return slices.Contains(known, k) })
	if err != nil {
		return trash.Filter{}, nil, err
	}
	f := trash.Filter{Repo: q["repository"], Tag: q["tag"], Digest: digest.Digest(q["digest"]), Run: q["run"], Plan: q["plan"]}
	if f.Repo != "" {
		if err := ValidateRepository(f.Repo); err != nil {
			return f, nil, err
		}
	}
	for _, t := range []struct {
		k string
		v *time.Time
	}{{"since", &f.Since}, {"until", &f.Until}} {
		if s, ok := q[t.k]; ok {
			if *t.v, err = time.Parse(time.RFC3339, s); err != nil {
				return f, nil, fmt.Errorf("%w: %s=%q: want an RFC 3339 time", errBadRequest, t.k, s)
			}
		}
	}
	return f, q, nil
}

// trashList serves GET /gc/v1/trash: the entries newest first, with the
// bytes they hold.
func (h *API) trashList(w http.ResponseWriter, r *http.Request) error {
	f, q, err := trashQuery(r, "repository", "tag", "digest", "run", "plan", "since", "until", "limit")
	if err != nil {
		return err
	}
	if f.Repo != "" {
		err = h.access.Authorize(r, f.Repo, "pull")
	} else {
		err = h.access.AuthorizeCatalog(r)
	}
	if err != nil {
		return err
	}
	limit := maxTrashList
	if v, ok := q["limit"]; ok {
		if limit, err = strconv.Atoi(v); !positiveRe.MatchString(v) || err != nil || limit > maxTrashList {
			return fmt.Errorf("%w: limit=%q: want an integer from 1 to %d", errBadRequest, v, maxTrashList)
		}
	}
	bin, err := h.trashBin()
	if err != nil {
		return err
	}
	entries, err := bin.List(r.Context(), f)
	if err != nil {
		return err
	}
	var held int64
	for _, e := range entries {
		held += e.Size
	}
	total := len(entries)
	if total > limit {
		entries = entries[:limit]
	}
	if entries == nil {
		entries = []trashentry.Entry{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"entries": entries, "total": total, "bytes_held": held,
		"keep_seconds": int64(bin.Keep() / time.Second)})
	return nil
}

// trashRestore serves POST /gc/v1/trash/restore.
func (h *API) trashRestore(w http.ResponseWriter, r *http.Request) error {
	f, _, err := trashQuery(r, "repository", "tag", "digest", "run", "plan")
	if err != nil {
		return err
	}
	sel := trash.Selector{Repo: f.Repo, Tag: f.Tag, Digest: f.Digest, Run: f.Run, Plan: f.Plan}
	if err := sel.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errBadRequest, err)
	}
	if err := h.AuthorizeRestore(r, sel); err != nil {
		return err
	}
	rep, err := h.backend.Trash.Restore(r.Context(), sel)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, rep)
	return nil
}

// AuthorizeRestore asks for what a restore of sel needs (sel is valid):
// delete on every repository it writes to, checked before anything is
// written; a run or plan with nothing in the trash, the catalog scope. The
// console's restore asks it too.
func (h *API) AuthorizeRestore(r *http.Request, sel trash.Selector) error {
	bin, err := h.trashBin()
	if err != nil {
		return err
	}
	repos := []string{sel.Repo}
	if sel.Repo == "" {
		entries, err := bin.List(r.Context(), trash.Filter{Run: sel.Run, Plan: sel.Plan})
		if err != nil {
			return err
		}
		repos = repos[:0]
		for _, e := range entries {
			if e.Repo != "" && !slices.Contains(repos, e.Repo) {
				repos = append(repos, e.Repo)
			}
		}
		if len(repos) == 0 {
			// nothing to restore (or only blobs no repository linked) is
			// the same answer for everyone with the catalog scope
			if err := h.access.AuthorizeCatalog(r); err != nil {
				return err
			}
		}
	}
	for _, repo := range repos {
		if err := h.access.Authorize(r, repo, "delete"); err != nil {
			return err
		}
	}
	return nil
}

// trashPurge serves POST /gc/v1/trash/purge?older_than=<duration>: every
// entry removed longer ago than that, whatever its expiry (space now).
func (h *API) trashPurge(w http.ResponseWriter, r *http.Request) error {
	q, err := strictQuery(r.URL.RawQuery, func(k string) bool { return k == "older_than" })
	if err != nil {
		return err
	}
	v, ok := q["older_than"]
	if !ok {
		return fmt.Errorf("%w: older_than is required (a duration such as 72h; 0s purges everything)", errBadRequest)
	}
	age, err := time.ParseDuration(v)
	if err != nil || age < 0 {
		return fmt.Errorf("%w: older_than=%q: want a non-negative duration such as 72h", errBadRequest, v)
	}
	if err := h.access.AuthorizeRegistry(r, trashResource, trashPurgeAction); err != nil {
		return err
	}
	bin, err := h.trashBin()
	if err != nil {
		return err
	}
	orphans, err := h.backend.Collector.Orphans(r.Context())
	if err != nil {
		return err
	}
	rep, err := bin.PurgeRemovedBefore(r.Context(), orphans, orphans.Now().Add(-age), maxPurge)
	if err != nil {
		return err
	}
	if freed := rep.Freed(); len(freed) > 0 && h.backend.Deletions != nil {
		// The data is gone now: told once, after the purge's last delete,
		// as a collect tells its deletes (docs/events.md).
		h.backend.Deletions.Deleted(context.WithoutCancel(r.Context()), reclaim.Deletions{Source: "trash",
			RunID: "purge-" + uuid.NewString(), Instance: h.backend.Collector.Instance(), Objects: freed})
	}
	writeJSON(w, http.StatusOK, rep)
	return nil
}
