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
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/distribution/distribution/v3/registry/api/errcode"
	"github.com/distribution/distribution/v3/registry/auth"
	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/sirupsen/logrus"

	"github.com/reclaim-registry/reclaim/internal/metrics"
	"github.com/reclaim-registry/reclaim/registry/accesscontrol"
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

var referrersIndexErrors = metrics.CounterVec("referrers", "index_errors_total", "Referrers index updates that failed (op: follow, read); the index is repaired by linkdb rebuild.", "op")

// referrersLog is logrus, like Distribution's own logging (its request
// context logger is internal to it).
var referrersLog = logrus.WithField("component", "referrers")

// referrersIndex is the part of referrers.Index the HTTP layer needs.
type referrersIndex interface {
	Add(ctx context.Context, repo string, subject digest.Digest, desc v1.Descriptor) error
	Remove(ctx context.Context, repo string, subject, referrer digest.Digest) error
	Follow(ctx context.Context, repo string, subject digest.Digest, desc v1.Descriptor) (bool, error)
	FollowFrom(ctx context.Context, repo string, subject digest.Digest, desc v1.Descriptor, linked bool) (bool, error)
	Page(ctx context.Context, repo string, subject digest.Digest, opts referrers.PageOptions) ([]v1.Descriptor, bool, error)
}

// referrersBackend is what the handler reads and writes: the index, and
// manifest payloads by digest (to learn the subject of a manifest being
// deleted).
type referrersBackend struct {
	index    referrersIndex
	manifest func(ctx context.Context, d digest.Digest) ([]byte, error)
}

// errNotAManifest: the blob is larger than any manifest Distribution
// accepts, so it has no subject.
var errNotAManifest = errors.New("not a manifest")

// backendFromDriver reads and writes on the storage driver the registry
// stores into, below any middleware: the index is Reclaim's own
// bookkeeping, and reading a manifest that is being deleted is not an
// access that should protect it from GC.
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
				return nil, fmt.Errorf("%w: blob %s is larger than a manifest can be", errNotAManifest, dg)
			}
			return b, nil
		},
	}
}

// referrersHandler serves the referrers API (referrers_page.go) and keeps
// the index current (referrers_index.go).
type referrersHandler struct {
	next    http.Handler
	prefix  string // config.HTTP.Prefix without its trailing slash
	headers http.Header
	backend *referrersBackend
	access  *accesscontrol.Control
}

func newReferrersHandler(conf *configuration.Configuration, b *referrersBackend, access *accesscontrol.Control, next http.Handler) *referrersHandler {
	return &referrersHandler{
		next:    next,
		prefix:  strings.TrimSuffix(conf.HTTP.Prefix, "/"),
		headers: conf.HTTP.Headers,
		backend: b,
		access:  access,
	}
}

// The last two path segments decide the route; Distribution's own routes
// never end in referrers/<x>, so repositories named ".../referrers" are safe.
// manifestRoute is the one pattern of a manifest's URL (name, reference):
// the referrers index and the sha256 check (digests.go) both route by it.
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
			h.putManifest(w, r, m[1], m[2])
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

// authorized checks pull access to repo, answering 401 with the challenge
// when it is missing, like Distribution's App.authorized.
func (h *referrersHandler) authorized(w http.ResponseWriter, r *http.Request, repo string) bool {
	ctx := r.Context()
	access := auth.Access{Resource: auth.Resource{Type: "repository", Name: repo}, Action: "pull"}
	grant, broken, err := h.access.Grant(r, access)
	if broken != nil {
		referrersLog.Errorf("referrers: access controller: %v", broken)
		h.serveError(ctx, w, errcode.ErrorCodeUnknown.WithDetail("access controller unavailable"))
		return false
	}
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
