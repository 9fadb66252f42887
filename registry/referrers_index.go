package registry

import (
	"context"
	"mime"
	"net/http"

	"github.com/distribution/reference"
	"github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/reclaim-registry/reclaim/storage/referrers"
)

// The index follows manifest PUTs and DELETEs that pass through to
// Distribution. Both sides update the index after Distribution changed the
// revision link and look at the link again afterwards, so a PUT and a
// DELETE of one manifest that race leave the index as the link ends up.

// putManifest passes a manifest PUT through to Distribution, keeping a copy
// of the body as Distribution reads it. If Distribution stores the manifest
// (201) and it has a subject, the index entry is written before the response
// header goes out, so a client that sees OCI-Subject can query it at once.
func (h *referrersHandler) putManifest(w http.ResponseWriter, r *http.Request, repo string) {
	body := referrers.CopyBody(r.Body)
	r.Body = body
	ctx := r.Context()
	rw := &statusHook{ResponseWriter: w, hook: func(status int) {
		if status == http.StatusCreated {
			h.indexPushed(ctx, w.Header(), r.Header.Get("Content-Type"), repo, body)
		}
	}}
	h.next.ServeHTTP(rw, r)
}

// indexPushed adds the manifest Distribution just stored to its subject's
// index and announces it with OCI-Subject. Failures are logged and counted,
// never turned into a failed push: the manifest is stored, and without
// OCI-Subject the client falls back to the tag schema.
func (h *referrersHandler) indexPushed(ctx context.Context, header http.Header, contentType, repo string, body *referrers.BodyCopy) {
	log := referrersLog
	payload, over, _ := body.Copy()
	if over {
		return // Distribution refuses those; nothing to index
	}
	dgst, err := digest.Parse(header.Get(headerContentDigest))
	if err != nil {
		// Distribution always sets it on 201; without it the copy cannot be
		// tied to what was stored.
		log.Warnf("referrers: manifest PUT in %s without a valid %s: %v", repo, headerContentDigest, err)
		return
	}
	if !dgst.Algorithm().Available() || dgst.Algorithm().FromBytes(payload) != dgst {
		log.Warnf("referrers: body of manifest PUT %s in %s does not match its digest; not indexed", dgst, repo)
		return
	}
	mt, _, _ := mime.ParseMediaType(contentType)
	subject, desc, ok, err := referrers.Of(payload, dgst, mt)
	if err != nil {
		log.Warnf("referrers: manifest %s in %s: %v", dgst, repo, err)
		return
	}
	if !ok {
		return
	}
	b := h.backend
	if err := b.index.Add(ctx, repo, subject, desc); err != nil {
		referrersIndexErrors.WithLabelValues("add").Inc()
		log.Errorf("referrers: index %s -> %s in %s: %v (run linkdb rebuild to repair)", dgst, subject, repo, err)
		return
	}
	// Check again: a DELETE of this manifest that ran between Distribution's
	// link write and our Add has already done its Remove. Both sides update
	// the index after the link and look at the link after the index, so
	// whichever looks last sees the other's link change and fixes the index.
	if linked, err := b.linked(ctx, repo, dgst); err == nil && !linked {
		if err := b.index.Remove(ctx, repo, subject, dgst); err != nil {
			referrersIndexErrors.WithLabelValues("remove").Inc()
			log.Errorf("referrers: unindex %s -> %s in %s: %v (run linkdb rebuild to repair)", dgst, subject, repo, err)
		}
		return
	}
	header.Set(headerOCISubject, subject.String())
}

// deleteManifest learns the subject of the manifest before Distribution
// deletes it (afterwards an online GC may already have freed the payload),
// and drops the index entry once the delete succeeded (202).
func (h *referrersHandler) deleteManifest(w http.ResponseWriter, r *http.Request, repo string, d digest.Digest) {
	ctx := r.Context()
	b := h.backend
	subject, desc := h.subjectOf(ctx, repo, d)
	if subject == "" {
		h.next.ServeHTTP(w, r)
		return
	}
	rw := &statusHook{ResponseWriter: w, hook: func(status int) {
		if status != http.StatusAccepted {
			return
		}
		if err := b.index.Remove(ctx, repo, subject, d); err != nil {
			referrersIndexErrors.WithLabelValues("remove").Inc()
			referrersLog.Errorf("referrers: unindex %s -> %s in %s: %v (run linkdb rebuild to repair)", d, subject, repo, err)
			return
		}
		// Check again (see indexPushed): pushed again since the delete?
		if linked, err := b.linked(ctx, repo, d); err == nil && linked {
			if err := b.index.Add(ctx, repo, subject, desc); err != nil {
				referrersIndexErrors.WithLabelValues("add").Inc()
				referrersLog.Errorf("referrers: index %s -> %s in %s: %v (run linkdb rebuild to repair)", d, subject, repo, err)
			}
		}
	}}
	h.next.ServeHTTP(rw, r)
}

// subjectOf returns the subject of manifest d and its index entry, or ""
// when it has none or cannot be read (then Distribution answers the DELETE
// itself, most likely with a 404).
func (h *referrersHandler) subjectOf(ctx context.Context, repo string, d digest.Digest) (digest.Digest, v1.Descriptor) {
	if _, err := reference.WithName(repo); err != nil {
		return "", v1.Descriptor{}
	}
	payload, err := h.backend.manifest(ctx, d)
	if err != nil {
		return "", v1.Descriptor{}
	}
	subject, desc, ok, err := referrers.Of(payload, d, "")
	if err != nil || !ok {
		return "", v1.Descriptor{}
	}
	return subject, desc
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
