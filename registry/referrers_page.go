package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/distribution/distribution/v3/registry/api/errcode"
	"github.com/distribution/reference"
	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/reclaim-registry/reclaim/storage/referrers"
)

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
	opts, err := pageOptions(r.URL.Query())
	if err == nil {
		err = h.writePage(w, r, repo, subject, opts)
	}
	if err != nil {
		h.serveError(ctx, w, err)
	}
}

// pageOptions reads the query: artifactType, n and last.
func pageOptions(q url.Values) (referrers.PageOptions, error) {
	opts := referrers.PageOptions{Limit: referrersPageSize, ArtifactType: q.Get(filterArtifactType)}
	if s := q.Get(referrersQueryPageKey); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return opts, errcode.ErrorCodePaginationNumberInvalid.WithDetail(map[string]string{"n": s})
		}
		// n=0 is a valid "nothing"; larger than a page is capped, which
		// the Link header makes visible to the client.
		opts.Limit = min(n, referrersPageSize)
	}
	if s := q.Get(referrersQueryLastKey); s != "" {
		var err error
		if opts.After, err = digest.Parse(s); err != nil {
			return opts, errcode.ErrorCodeDigestInvalid.WithDetail(map[string]string{"last": s})
		}
	}
	return opts, nil
}

// writePage answers one page of subject's index in repo.
func (h *referrersHandler) writePage(w http.ResponseWriter, r *http.Request, repo string, subject digest.Digest, opts referrers.PageOptions) error {
	page, more, err := h.page(r.Context(), repo, subject, opts)
	if err != nil {
		return err
	}
	body, err := jsonIndex(page)
	if err != nil {
		return errcode.ErrorCodeUnknown.WithDetail(err.Error())
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
	return nil
}

// page reads one page of the index: "manifests": [], never null.
func (h *referrersHandler) page(ctx context.Context, repo string, subject digest.Digest, opts referrers.PageOptions) ([]v1.Descriptor, bool, error) {
	if opts.Limit == 0 {
		return []v1.Descriptor{}, false, nil
	}
	page, more, err := h.backend.index.Page(ctx, repo, subject, opts)
	switch {
	case errors.Is(err, referrers.ErrInvalid):
		return nil, false, errcode.ErrorCodeDigestInvalid.WithDetail(err.Error())
	case err != nil:
		referrersIndexErrors.WithLabelValues("read").Inc()
		referrersLog.Errorf("referrers of %s in %s: %v", subject, repo, err)
		return nil, false, errcode.ErrorCodeUnknown.WithDetail("the referrers index could not be read")
	case page == nil:
		page = []v1.Descriptor{}
	}
	return page, more, nil
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
