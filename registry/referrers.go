package registry

// The OCI 1.1 referrers API, which Distribution v3 does not have:
//
//	GET /v2/<name>/referrers/<digest>[?artifactType=&n=&last=]
//	    an image index of the manifests in <name> whose subject is <digest>
//	PUT /v2/<name>/manifests/<ref>   (passed through to Distribution)
//	    on 201 for a manifest with a subject: index it, answer OCI-Subject
//	DELETE /v2/<name>/manifests/<digest>   (passed through)
//	    on 202: drop the manifest from its subject's index
//
// The index itself is referrers.Index. It is derived data: when an index
// write fails the push still succeeds, without OCI-Subject, which tells the
// client to fall back to the referrers tag schema; `linkdb rebuild` repairs
// the index from the manifests.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/distribution/distribution/v3/registry/api/errcode"
	"github.com/distribution/distribution/v3/registry/auth"
	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/distribution/distribution/v3/registry/storage/driver/factory"
	"github.com/distribution/reference"
	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/sirupsen/logrus"

	"github.com/reclaim-registry/reclaim/storage"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/referrers"
)

const (
	// referrersPageSize is the default and largest page of the referrers
	// API. A page costs about one storage read per entry.
	referrersPageSize = 1000

	headerOCISubject      = "OCI-Subject"
	headerFiltersApplied  = "OCI-Filters-Applied"
	headerContentDigest   = "Docker-Content-Digest"
	headerAPIVersion      = "Docker-Distribution-API-Version"
	filterArtifactType    = "artifactType"
	referrersQueryPageKey = "n"
	referrersQueryLastKey = "last"
)

var referrersIndexErrors = promauto.NewCounterVec(prometheus.CounterOpts{
	Namespace: "reclaim",
	Subsystem: "referrers",
	Name:      "index_errors_total",
	Help:      "Referrers index updates that failed (op: add, remove, read); the index is repaired by linkdb rebuild.",
}, []string{"op"})

// referrersLog is logrus, like Distribution's own logging (its request
// context logger is internal to it).
var referrersLog = logrus.WithField("component", "referrers")

func init() {
	register(newReferrersHandler)
}

// referrersIndex is the part of referrers.Index the HTTP layer needs.
type referrersIndex interface {
	Add(ctx context.Context, repo string, subject digest.Digest, desc v1.Descriptor) error
	Remove(ctx context.Context, repo string, subject, referrer digest.Digest) error
	Page(ctx context.Context, repo string, subject digest.Digest, opts referrers.PageOptions) ([]v1.Descriptor, bool, error)
}

// referrersBackend is what the handler reads and writes: the index,
// manifest payloads by digest (to learn the subject of a manifest being
// deleted), and whether a repository links a manifest (to re-check the index
// against concurrent pushes and deletes).
type referrersBackend struct {
	index    referrersIndex
	manifest func(ctx context.Context, d digest.Digest) ([]byte, error)
	linked   func(ctx context.Context, repo string, d digest.Digest) (bool, error)
}

// openDriver returns the storage driver the registry stores into, below
// any middleware: the index is Reclaim's own bookkeeping, and reading a
// manifest that is being deleted is not an access that should protect it
// from GC. With the reclaim middleware configured this is the process-wide
// Env's raw driver (the very instance Distribution uses); without it, a
// driver of our own from config.storage.
var openDriver = func(ctx context.Context, config *configuration.Configuration) (storagedriver.StorageDriver, error) {
	for _, m := range config.Middleware["storage"] {
		if m.Name == storage.MiddlewareName && !m.Disabled {
			env, err := storage.Open(ctx, config)
			if err != nil {
				return nil, err
			}
			return env.Raw, nil
		}
	}
	params := config.Storage.Parameters()
	if params == nil {
		params = configuration.Parameters{}
	}
	return factory.Create(ctx, config.Storage.Type(), params)
}

func backendFromDriver(d storagedriver.StorageDriver) *referrersBackend {
	return &referrersBackend{
		index: referrers.New(d),
		manifest: func(ctx context.Context, dg digest.Digest) ([]byte, error) {
			rc, err := d.Reader(ctx, layout.BlobDataPath(dg), 0)
			if err != nil {
				return nil, err
			}
			defer rc.Close()
			b, err := io.ReadAll(io.LimitReader(rc, referrers.MaxManifestSize+1))
			if err != nil {
				return nil, err
			}
			if len(b) > referrers.MaxManifestSize {
				return nil, fmt.Errorf("blob %s is larger than a manifest can be", dg)
			}
			return b, nil
		},
		linked: func(ctx context.Context, repo string, dg digest.Digest) (bool, error) {
			_, err := d.Stat(ctx, layout.RevisionLinkPath(repo, dg))
			var nf storagedriver.PathNotFoundError
			if errors.As(err, &nf) {
				return false, nil
			}
			return err == nil, err
		},
	}
}

// referrersHandler serves the referrers API and keeps the index current.
type referrersHandler struct {
	next   http.Handler
	prefix string // config.HTTP.Prefix without its trailing slash

	mu      sync.Mutex
	backend *referrersBackend // nil until the first successful open
	open    func(context.Context) (*referrersBackend, error)
	access  func() (auth.AccessController, error)
	headers http.Header
}

func newReferrersHandler(config *configuration.Configuration, next http.Handler) http.Handler {
	h := &referrersHandler{
		next:    next,
		prefix:  strings.TrimSuffix(config.HTTP.Prefix, "/"),
		headers: config.HTTP.Headers,
	}
	h.open = func(ctx context.Context) (*referrersBackend, error) {
		d, err := openDriver(ctx, config)
		if err != nil {
			return nil, err
		}
		return backendFromDriver(d), nil
	}
	// Distribution has already built (and validated) the same controller
	// from the same config; this is our own instance of it.
	h.access = sync.OnceValues(func() (auth.AccessController, error) {
		if config.Auth.Type() == "" {
			return nil, nil
		}
		return auth.GetAccessController(config.Auth.Type(), config.Auth.Parameters())
	})
	return h
}

// getBackend opens the backend on first use. A failure is not cached: the
// next request tries again.
func (h *referrersHandler) getBackend(ctx context.Context) (*referrersBackend, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.backend != nil {
		return h.backend, nil
	}
	b, err := h.open(ctx)
	if err != nil {
		return nil, fmt.Errorf("open storage for the referrers index: %w", err)
	}
	h.backend = b
	return b, nil
}

// The last two path segments decide the route; Distribution's own routes
// never end in referrers/<x>, so repositories named ".../referrers" are safe.
var (
	referrersRoute = regexp.MustCompile(`^/v2/(.+)/referrers/([^/]*)$`)
	manifestRoute  = regexp.MustCompile(`^/v2/(.+)/manifests/([^/]+)$`)
)

func (h *referrersHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p, ok := strings.CutPrefix(r.URL.Path, h.prefix)
	if !ok {
		h.next.ServeHTTP(w, r)
		return
	}
	if m := referrersRoute.FindStringSubmatch(p); m != nil {
		h.serveReferrers(w, r, m[1], m[2])
		return
	}
	if m := manifestRoute.FindStringSubmatch(p); m != nil {
		switch r.Method {
		case http.MethodPut:
			h.putManifest(w, r, m[1])
			return
		case http.MethodDelete:
			if d, err := digest.Parse(m[2]); err == nil {
				h.deleteManifest(w, r, m[1], d)
				return
			}
		}
	}
	h.next.ServeHTTP(w, r)
}

// serveReferrers answers GET /v2/<name>/referrers/<digest>.
func (h *referrersHandler) serveReferrers(w http.ResponseWriter, r *http.Request, repo, ref string) {
	ctx := r.Context()
	for k, v := range h.headers {
		w.Header()[k] = v
	}
	w.Header().Set(headerAPIVersion, "registry/2.0")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		h.serveError(ctx, w, errcode.ErrorCodeUnsupported.WithMessage("the referrers API is read-only"))
		return
	}
	if _, err := reference.WithName(repo); err != nil {
		h.serveError(ctx, w, errcode.ErrorCodeNameInvalid.WithDetail(err.Error()))
		return
	}
	// Authorize before validating the rest, as Distribution does, so that an
	// anonymous client learns nothing but the challenge.
	if !h.authorized(w, r, repo) {
		return
	}
	subject, err := digest.Parse(ref)
	if err != nil {
		h.serveError(ctx, w, errcode.ErrorCodeDigestInvalid.WithDetail(err.Error()))
		return
	}
	q := r.URL.Query()
	opts := referrers.PageOptions{Limit: referrersPageSize, ArtifactType: q.Get(filterArtifactType)}
	if s := q.Get(referrersQueryPageKey); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			h.serveError(ctx, w, errcode.ErrorCodePaginationNumberInvalid.WithDetail(map[string]string{"n": s}))
			return
		}
		// n=0 is a valid "nothing"; larger than a page is capped, which
		// the Link header makes visible to the client.
		opts.Limit = min(n, referrersPageSize)
	}
	if s := q.Get(referrersQueryLastKey); s != "" {
		if opts.After, err = digest.Parse(s); err != nil {
			h.serveError(ctx, w, errcode.ErrorCodeDigestInvalid.WithDetail(map[string]string{"last": s}))
			return
		}
	}

	var page []v1.Descriptor
	more := false
	if opts.Limit > 0 {
		b, err := h.getBackend(ctx)
		if err == nil {
			page, more, err = b.index.Page(ctx, repo, subject, opts)
		}
		if err != nil {
			if errors.Is(err, referrers.ErrInvalid) {
				h.serveError(ctx, w, errcode.ErrorCodeDigestInvalid.WithDetail(err.Error()))
				return
			}
			referrersIndexErrors.WithLabelValues("read").Inc()
			referrersLog.Errorf("referrers of %s in %s: %v", subject, repo, err)
			h.serveError(ctx, w, errcode.ErrorCodeUnknown.WithDetail("the referrers index could not be read"))
			return
		}
	}
	if page == nil {
		page = []v1.Descriptor{} // "manifests": [], never null
	}
	body, err := jsonIndex(page)
	if err != nil {
		h.serveError(ctx, w, errcode.ErrorCodeUnknown.WithDetail(err.Error()))
		return
	}
	if more {
		w.Header().Set("Link", h.nextLink(repo, subject, opts, page))
	}
	if opts.ArtifactType != "" {
		w.Header().Set(headerFiltersApplied, filterArtifactType)
	}
	w.Header().Set("Content-Type", v1.MediaTypeImageIndex)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write(body)
	}
}

func jsonIndex(manifests []v1.Descriptor) ([]byte, error) {
	return json.Marshal(v1.Index{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: v1.MediaTypeImageIndex,
		Manifests: manifests,
	})
}

// nextLink is the RFC 5988 Link to the page after page, relative to the
// registry root as Distribution's own tag and catalog links are.
func (h *referrersHandler) nextLink(repo string, subject digest.Digest, opts referrers.PageOptions, page []v1.Descriptor) string {
	q := url.Values{}
	q.Set(referrersQueryPageKey, strconv.Itoa(opts.Limit))
	q.Set(referrersQueryLastKey, page[len(page)-1].Digest.String())
	if opts.ArtifactType != "" {
		q.Set(filterArtifactType, opts.ArtifactType)
	}
	u := url.URL{Path: h.prefix + "/v2/" + repo + "/referrers/" + subject.String(), RawQuery: q.Encode()}
	return fmt.Sprintf("<%s>; rel=\"next\"", u.String())
}

// authorized checks pull access to repo, answering 401 with the challenge
// when it is missing, like Distribution's App.authorized.
func (h *referrersHandler) authorized(w http.ResponseWriter, r *http.Request, repo string) bool {
	ctx := r.Context()
	ac, err := h.access()
	if err != nil {
		referrersLog.Errorf("referrers: access controller: %v", err)
		h.serveError(ctx, w, errcode.ErrorCodeUnknown.WithDetail("access controller unavailable"))
		return false
	}
	if ac == nil {
		return true
	}
	access := auth.Access{Resource: auth.Resource{Type: "repository", Name: repo}, Action: "pull"}
	grant, err := ac.Authorized(r, access)
	if err != nil {
		var ch auth.Challenge
		if errors.As(err, &ch) {
			ch.SetHeaders(r, w)
			h.serveError(ctx, w, errcode.ErrorCodeUnauthorized.WithDetail([]auth.Access{access}))
			return false
		}
		// As upstream: a failing access controller is a configuration
		// problem; say nothing to the client.
		referrersLog.Errorf("referrers: checking authorization: %v", err)
		w.WriteHeader(http.StatusBadRequest)
		return false
	}
	if grant == nil {
		h.serveError(ctx, w, errcode.ErrorCodeUnknown.WithDetail("access controller returned neither a grant nor an error"))
		return false
	}
	return true
}

func (h *referrersHandler) serveError(ctx context.Context, w http.ResponseWriter, err error) {
	if err := errcode.ServeJSON(w, err); err != nil {
		referrersLog.Errorf("referrers: writing error: %v", err)
	}
}

// putManifest passes a manifest PUT through to Distribution, keeping a copy
// of the body as Distribution reads it. If Distribution stores the manifest
// (201) and it has a subject, the index entry is written before the response
// header goes out, so a client that sees OCI-Subject can query it at once.
func (h *referrersHandler) putManifest(w http.ResponseWriter, r *http.Request, repo string) {
	body := &cappedTee{ReadCloser: r.Body, limit: referrers.MaxManifestSize}
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
func (h *referrersHandler) indexPushed(ctx context.Context, header http.Header, contentType, repo string, body *cappedTee) {
	log := referrersLog
	if body.overflow {
		return // Distribution refuses those; nothing to index
	}
	payload := body.buf.Bytes()
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
	b, err := h.getBackend(ctx)
	if err == nil {
		err = b.index.Add(ctx, repo, subject, desc)
	}
	if err != nil {
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
	b, subject, desc := h.subjectOf(ctx, repo, d)
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
func (h *referrersHandler) subjectOf(ctx context.Context, repo string, d digest.Digest) (*referrersBackend, digest.Digest, v1.Descriptor) {
	if _, err := reference.WithName(repo); err != nil {
		return nil, "", v1.Descriptor{}
	}
	b, err := h.getBackend(ctx)
	if err != nil {
		referrersLog.Errorf("referrers: %v", err)
		return nil, "", v1.Descriptor{}
	}
	payload, err := b.manifest(ctx, d)
	if err != nil {
		return nil, "", v1.Descriptor{}
	}
	subject, desc, ok, err := referrers.Of(payload, d, "")
	if err != nil || !ok {
		return nil, "", v1.Descriptor{}
	}
	return b, subject, desc
}

// cappedTee copies what the reader reads, up to limit bytes.
type cappedTee struct {
	io.ReadCloser
	limit    int
	buf      bytes.Buffer
	overflow bool
}

func (t *cappedTee) Read(p []byte) (int, error) {
	n, err := t.ReadCloser.Read(p)
	if n > 0 && !t.overflow {
		if t.buf.Len()+n > t.limit {
			t.overflow = true
			t.buf = bytes.Buffer{}
		} else {
			t.buf.Write(p[:n])
		}
	}
	return n, err
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
