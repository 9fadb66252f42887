package registry

import (
	"bytes"
	"context"
	"net/http"
	"regexp"
	"strconv"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/sirupsen/logrus"

	"github.com/reclaim-registry/reclaim/internal/metrics"
	"github.com/reclaim-registry/reclaim/reclaim/trashentry"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/trash"
)

var (
	metricTrashHits = metrics.CounterVec("trash", "hits_total",
		"Pulls (manifest GET/HEAD by tag or digest, blob GET/HEAD) that would have answered 404 and asked for something in the trash, by repository and kind (tag, manifest, layer_link).",
		"repository", "kind")
	metricTrashRestoredOnPull = metrics.Counter("trash", "restored_on_pull_total",
		"Trash entries restored by a pull (trash.restoreonpull), served instead of a 404.")
)

// pullPath is a pull Distribution answers: /v2/<name>/manifests/<ref> or
// /v2/<name>/blobs/<digest>.
var pullPath = regexp.MustCompile(`^/v2/(.+)/(manifests|blobs)/([^/]+)$`)

// trashPulls tells a pull that would answer 404 whether it asked for
// something in the trash (one Redis round trip, paid only by a 404): such
// a pull is counted, logged with the entry (the shipped alert
// ReclaimTrashHit fires on the count) and, with restoreOnPull, the entry
// is restored and the request served again instead of the 404.
func trashPulls(bin *trash.Bin, restoreOnPull bool, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m := pullPath.FindStringSubmatch(r.URL.Path)
		if m == nil || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
			next.ServeHTTP(w, r)
			return
		}
		repo, name, sel := trashName(m[1], m[2], m[3])
		if name == "" {
			next.ServeHTTP(w, r)
			return
		}
		hw := &holdNotFound{ResponseWriter: w}
		next.ServeHTTP(hw, r)
		if !hw.held {
			return
		}
		ctx := r.Context()
		e, ok, err := bin.Lookup(ctx, repo, name)
		if err != nil || !ok {
			hw.release()
			return
		}
		metricTrashHits.WithLabelValues(repo, string(e.Kind)).Inc()
		// the day's hit count, after the answer when it is a 404: the
		// client waits for the lookup's one round trip, not for this one
		defer func() { _ = bin.CountHit(context.WithoutCancel(ctx), e, time.Now()) }()
		log := logrus.WithFields(logrus.Fields{"repository": repo, "asked": name, "entry": e.ID, "kind": e.Kind,
			"removed": e.Removed.Format(time.RFC3339), "by": e.By, "run": e.Run, "plan": e.Plan})
		days := int(time.Since(e.Removed).Hours() / 24)
		if !restoreOnPull {
			log.Warnf("reclaim: a pull asked for something deleted %d days ago by %s (trash entry %s); answered 404, restore it with POST /gc/v1/trash/restore", days, deleter(e), e.ID)
			hw.release()
			return
		}
		rep, err := bin.Restore(ctx, sel)
		if err != nil || rep.Restored == 0 {
			log.WithError(err).Warnf("reclaim: a pull asked for something deleted %d days ago by %s (trash entry %s); restore on pull failed: %s; answered 404", days, deleter(e), e.ID, outcomes(rep))
			hw.release()
			return
		}
		metricTrashRestoredOnPull.Add(float64(rep.Restored))
		log.Warnf("reclaim: a pull asked for something deleted %d days ago by %s (trash entry %s); restored it (trash.restoreonpull) and served the pull", days, deleter(e), e.ID)
		next.ServeHTTP(w, r)
	})
}

// trashName is the trash index name a pull asks for, and the restore
// that would answer it; "" when the path is not one the trash can answer.
func trashName(repo, what, ref string) (string, string, trash.Selector) {
	if !layout.ValidRepo(repo) {
		return "", "", trash.Selector{}
	}
	d := digest.Digest(ref)
	if layout.ValidDigest(d) && d.Algorithm() != digest.SHA256 {
		return "", "", trash.Selector{} // only sha256 is ever linked, so held (digests.go)
	}
	switch {
	case what == "blobs" && layout.ValidDigest(d):
		return repo, "blob:" + ref, trash.Selector{Repo: repo, Digest: d}
	case what == "manifests" && layout.ValidDigest(d):
		return repo, ref, trash.Selector{Repo: repo, Digest: d}
	case what == "manifests" && tagRe.MatchString(ref):
		return repo, "tag:" + ref, trash.Selector{Repo: repo, Tag: ref}
	}
	return "", "", trash.Selector{}
}

// tagRe is the OCI tag grammar.
var tagRe = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$`)

func deleter(e trashentry.Entry) string {
	switch {
	case e.Plan != "":
		return "retention plan " + e.Plan
	case e.Run != "":
		return e.By + " run " + e.Run
	}
	return e.By
}

func outcomes(rep trash.RestoreReport) string {
	var b bytes.Buffer
	for i, e := range rep.Entries {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(e.Outcome.String())
		if e.Detail != "" {
			b.WriteString(" (" + e.Detail + ")")
		}
	}
	if b.Len() == 0 {
		return "nothing to restore"
	}
	return b.String()
}

// holdNotFound passes every answer through but a 404, which it holds
// (headers and body) until release: the wrapper decides whether the
// client gets it or the request is served again.
type holdNotFound struct {
	http.ResponseWriter
	held, wrote bool
	status      int
	header      http.Header
	body        bytes.Buffer
}

func (h *holdNotFound) WriteHeader(code int) {
	if h.wrote || h.held {
		return
	}
	if code == http.StatusNotFound {
		h.held, h.status = true, code
		h.header = h.ResponseWriter.Header().Clone()
		for k := range h.ResponseWriter.Header() {
			h.ResponseWriter.Header().Del(k) // a served retry sets its own
		}
		return
	}
	h.wrote = true
	h.ResponseWriter.WriteHeader(code)
}

func (h *holdNotFound) Write(b []byte) (int, error) {
	if !h.wrote && !h.held {
		h.WriteHeader(http.StatusOK)
	}
	if h.held {
		return h.body.Write(b)
	}
	return h.ResponseWriter.Write(b)
}

// release sends the held 404 as it was written, flushed.
func (h *holdNotFound) release() {
	for k, v := range h.header {
		h.ResponseWriter.Header()[k] = v
	}
	if h.ResponseWriter.Header().Get("Content-Length") == "" {
		// as net/http sets it for an answer written whole; the flush
		// below would otherwise send the body chunked, without it
		h.ResponseWriter.Header().Set("Content-Length", strconv.Itoa(h.body.Len()))
	}
	h.ResponseWriter.WriteHeader(h.status)
	_, _ = h.ResponseWriter.Write(h.body.Bytes())
	_ = http.NewResponseController(h.ResponseWriter).Flush()
}

// Flush passes a flush through once the answer is not a held 404.
func (h *holdNotFound) Flush() {
	if f, ok := h.ResponseWriter.(http.Flusher); ok && h.wrote {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (h *holdNotFound) Unwrap() http.ResponseWriter { return h.ResponseWriter }
