package registry

import (
	"context"
	"errors"
	"mime"
	"net/http"
	"time"

	"github.com/distribution/reference"
	"github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/referrers"
)

// The index follows manifest PUTs and DELETEs that pass through to
// Distribution. After Distribution answered, each side makes the index entry
// follow the revision link as it is then (referrers.Index.Follow: look,
// update, look again until they agree), so a PUT and a DELETE of one
// manifest that race leave the index as the link ends up. The upkeep runs
// on a context of its own: a client that goes away once Distribution has
// changed the link must not leave the entry behind (found by TestSoakS3: a
// DELETE cut off at the end of the workload left a stale entry).

// upkeepTimeout bounds the index upkeep of one request, which outlives a
// client that went away.
const upkeepTimeout = 30 * time.Second

// putManifest passes a manifest PUT through to Distribution, keeping a copy
// of the body as Distribution reads it. If Distribution stores the manifest
// (201) and it has a subject, the index entry is written before the response
// header goes out, so a client that sees OCI-Subject can query it at once.
// A PUT that failed with a server error may have written its revision link
// before it failed: its entry follows the link too.
func (h *referrersHandler) putManifest(w http.ResponseWriter, r *http.Request, repo, reference string) {
	body := referrers.CopyBody(r.Body)
	r.Body = body
	ctx := r.Context()
	contentType := r.Header.Get("Content-Type")
	rw := &statusHook{ResponseWriter: w, hook: func(status int) {
		switch {
		case status == http.StatusCreated:
			h.indexPushed(ctx, w.Header(), contentType, repo, body)
		case status >= http.StatusInternalServerError:
			h.indexFailedPut(ctx, contentType, repo, reference, body)
		}
	}}
	h.next.ServeHTTP(rw, r)
}

// indexPushed adds the manifest Distribution just stored to its subject's
// index and announces it with OCI-Subject. Failures are logged and counted,
// never turned into a failed push: the manifest is stored, and without
// OCI-Subject the client falls back to the tag schema.
func (h *referrersHandler) indexPushed(ctx context.Context, header http.Header, contentType, repo string, body *referrers.BodyCopy) {
	dgst, err := digest.Parse(header.Get(headerContentDigest))
	if err != nil {
		// Distribution always sets it on 201; without it the copy cannot be
		// tied to what was stored.
		referrersLog.Warnf("referrers: manifest PUT in %s without a valid %s: %v", repo, headerContentDigest, err)
		return
	}
	subject, desc, ok := entryOfBody(repo, dgst, contentType, body)
	if ok && h.follow(ctx, http.StatusCreated, repo, subject, desc) {
		header.Set(headerOCISubject, subject.String())
	}
}

// indexFailedPut makes the entry of a PUT that Distribution answered with a
// server error follow its revision link. Distribution names no digest then:
// it is the reference's, or the payload's canonical one (the digest
// Distribution stores a PUT by tag under).
func (h *referrersHandler) indexFailedPut(ctx context.Context, contentType, repo, reference string, body *referrers.BodyCopy) {
	dgst, err := digest.Parse(reference)
	if err != nil {
		payload, over, _ := body.Copy()
		if over {
			return
		}
		dgst = digest.FromBytes(payload)
	}
	if subject, desc, ok := entryOfBody(repo, dgst, contentType, body); ok {
		h.follow(ctx, http.StatusInternalServerError, repo, subject, desc)
	}
}

// entryOfBody is the index entry of the manifest PUT whose body is body and
// digest dgst; ok is false when it has none (no subject, too large for a
// manifest, not the body of dgst, not a manifest).
func entryOfBody(repo string, dgst digest.Digest, contentType string, body *referrers.BodyCopy) (subject digest.Digest, desc v1.Descriptor, ok bool) {
	payload, over, _ := body.Copy()
	if over {
		return "", desc, false // Distribution refuses those; nothing to index
	}
	if !dgst.Algorithm().Available() || dgst.Algorithm().FromBytes(payload) != dgst {
		referrersLog.Warnf("referrers: body of manifest PUT %s in %s does not match its digest; not indexed", dgst, repo)
		return "", desc, false
	}
	mt, _, _ := mime.ParseMediaType(contentType)
	subject, desc, ok, err := referrers.Of(payload, dgst, mt)
	if err != nil {
		referrersLog.Warnf("referrers: manifest %s in %s: %v", dgst, repo, err)
		return "", desc, false
	}
	return subject, desc, ok
}

// follow makes the entry of desc under subject follow its revision link
// on the upkeep's own context, after Distribution answered status, and
// reports whether the link was there at the end. A 201 wrote the link and
// a 202 removed it, so the entry starts from that
// (referrers.Index.FollowFrom: one look, as before Follow); a server error
// says nothing of the link, so Follow looks first. A failure is logged and
// counted; it reports false then.
func (h *referrersHandler) follow(ctx context.Context, status int, repo string, subject digest.Digest, desc v1.Descriptor) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), upkeepTimeout)
	defer cancel()
	var linked bool
	var err error
	switch status {
	case http.StatusCreated, http.StatusAccepted:
		linked, err = h.backend.index.FollowFrom(ctx, repo, subject, desc, status == http.StatusCreated)
	default:
		linked, err = h.backend.index.Follow(ctx, repo, subject, desc)
	}
	if err != nil {
		referrersIndexErrors.WithLabelValues("follow").Inc()
		referrersLog.Errorf("referrers: index entry %s -> %s in %s: %v (run linkdb rebuild to repair)", desc.Digest, subject, repo, err)
		return false
	}
	return linked
}

// deleteManifest learns the subject of the manifest before Distribution
// deletes it (afterwards an online GC may already have freed the payload),
// and makes its entry follow the revision link once Distribution answered
// 202, or a server error (the link may be gone though the DELETE failed).
// A payload it could not read before is read again then.
func (h *referrersHandler) deleteManifest(w http.ResponseWriter, r *http.Request, repo string, d digest.Digest) {
	ctx := r.Context()
	subject, desc, err := h.subjectOf(ctx, repo, d)
	if subject == "" && err == nil {
		h.next.ServeHTTP(w, r)
		return
	}
	rw := &statusHook{ResponseWriter: w, hook: func(status int) {
		if status != http.StatusAccepted && status < http.StatusInternalServerError {
			return
		}
		if err != nil {
			uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), upkeepTimeout)
			subject, desc, err = h.subjectOf(uctx, repo, d)
			cancel()
		}
		switch {
		case err != nil:
			referrersIndexErrors.WithLabelValues("read").Inc()
			referrersLog.Errorf("referrers: subject of deleted manifest %s in %s: %v; its index entry may be left (run linkdb rebuild to repair)", d, repo, err)
		case subject != "":
			h.follow(ctx, status, repo, subject, desc)
		}
	}}
	h.next.ServeHTTP(rw, r)
}

// subjectOf returns the subject of manifest d and its index entry, or ""
// when it has none: not a manifest, too large for one, or gone (then
// Distribution answers the DELETE itself, most likely with a 404). An error
// says the payload could not be read: whether it has a subject is unknown.
func (h *referrersHandler) subjectOf(ctx context.Context, repo string, d digest.Digest) (digest.Digest, v1.Descriptor, error) {
	if _, err := reference.WithName(repo); err != nil {
		return "", v1.Descriptor{}, nil
	}
	payload, err := h.backend.manifest(ctx, d)
	switch {
	case layout.IsNotFound(err), errors.Is(err, errNotAManifest):
		return "", v1.Descriptor{}, nil
	case err != nil:
		return "", v1.Descriptor{}, err
	}
	subject, desc, ok, err := referrers.Of(payload, d, "")
	if err != nil || !ok {
		return "", v1.Descriptor{}, nil
	}
	return subject, desc, nil
}

// statusHook calls hook with the status code right before the header is
// written, while headers can still be set.
type statusHook struct {
	http.ResponseWriter
	hook        func(status int)
	wroteHeader bool
}

func (s *statusHook) WriteHeader(status int) {
	if !s.wroteHeader && status >= 200 {
		s.wroteHeader = true
		s.hook(status)
	}
	s.ResponseWriter.WriteHeader(status)
}

func (s *statusHook) Write(b []byte) (int, error) {
	if !s.wroteHeader {
		s.WriteHeader(http.StatusOK)
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusHook) Flush() {
	if !s.wroteHeader {
		s.WriteHeader(http.StatusOK)
	}
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (s *statusHook) Unwrap() http.ResponseWriter { return s.ResponseWriter }
