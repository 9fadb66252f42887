package middleware

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path"
	"strings"
	"sync"

	"github.com/distribution/distribution/v3"
	"github.com/distribution/distribution/v3/manifest/manifestlist"
	"github.com/distribution/distribution/v3/manifest/ocischema"
	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/redisstate"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/referrers"
	"golang.org/x/sync/errgroup"
)

// Index children (docs/gc-protocol.md §5).
//
// Distribution checks that the children of an image index (or Docker
// manifest list) exist only with `validation.manifests.indexes.platforms:
// all` (the default) and validation enabled; with `none`, with `list` for
// the platforms not listed, or with `validation.disabled: true`, an index
// PUT reads nothing of its children from storage, so no driver call would
// fence-check them. GC could then delete a child's revision link, or its
// blob, under the push: the index is acknowledged and a child is missing.
//
// So the middleware checks every child itself, whatever that setting:
// Handler records the body of each manifest PUT as Distribution reads it
// (watchManifestPut), and the request's first fence-checked driver call
// (driver.guardWait calls indexChildren) parses it with Distribution's own
// UnmarshalManifest and, for an index, fence-checks each child blob with
// repository R's links to it before anything else proceeds. Every write of
// a manifest PUT (the index's blob data and its revision link) goes through
// guardWait, so none happens before the children are checked; a fence on
// any child fails them all (503 + Retry-After, nothing written).
//
// The check runs inside Distribution's request, not in front of it: after
// authentication (an anonymous client cannot make the registry touch
// arbitrary digests), after Distribution accepted the body (size limit,
// digest) and on the very bytes and Content-Type it parsed, so "index or
// not" is decided exactly as Distribution decides it. A body that could not
// be recorded whole, or that fails to parse although Distribution went on
// to storage, fails the request (fail closed), never counts as "no
// children".

// indexCheckConcurrency bounds the parallel fence checks of one index's
// children: a large index costs len/8 round-trip times, not len.
const indexCheckConcurrency = 8

// errIndexUnchecked: the children of a manifest PUT could not be determined,
// so the PUT must not proceed.
var errIndexUnchecked = errors.New("storage: index children could not be checked")

type (
	indexWatchKey       struct{}
	checkingChildrenKey struct{}
)

// indexWatch is one manifest PUT's body, recorded for the children check.
type indexWatch struct {
	body        *referrers.BodyCopy
	contentType string

	once sync.Once
	err  error // the check's outcome, returned to every later driver call
	// digest and refs, set by the check: the manifest being PUT, and what
	// its revision link makes referenced (each with repo's links to it),
	// checked again before that link is written (refsBeforeRevision)
	digest digest.Digest
	refs   []redisstate.BlobTouch
}

// isManifestPath reports whether p can be Distribution's manifest route,
// [<prefix>]/v2/<name>/manifests/<reference>: a reference holds no "/".
func isManifestPath(p string) bool {
	return strings.Contains(p, "/v2/") && strings.HasSuffix(path.Dir(p), "/manifests")
}

// watchManifestPut returns r with its body recorded when r is a manifest
// PUT (Handler calls it). Anything else is returned as it is.
func watchManifestPut(r *http.Request) *http.Request {
	if r.Method != http.MethodPut || !isManifestPath(r.URL.Path) {
		return r
	}
	w := &indexWatch{body: referrers.CopyBody(r.Body), contentType: r.Header.Get("Content-Type")}
	r = r.WithContext(context.WithValue(r.Context(), indexWatchKey{}, w))
	r.Body = w.body
	return r
}

// indexChildren runs the children check of the manifest PUT ctx belongs to,
// once per request, and returns its outcome to every driver call of the
// request. Calls made by the check itself pass through.
func (d *driver) indexChildren(ctx context.Context) error {
	w, _ := ctx.Value(indexWatchKey{}).(*indexWatch)
	if w == nil {
		if scopeOf(ctx) != nil && requestOf(ctx).intent == intentReference {
			// Distribution routed a manifest PUT that Handler did not
			// recognise: its children cannot be known.
			return fmt.Errorf("%w: manifest PUT body was not recorded", errIndexUnchecked)
		}
		return nil
	}
	if ctx.Value(checkingChildrenKey{}) != nil {
		return nil
	}
	w.once.Do(func() {
		w.err = d.checkChildren(context.WithValue(ctx, checkingChildrenKey{}, true), w)
	})
	return w.err
}

// checkChildren fence-checks every child of the index being PUT: the child
// blob with R's revision link and layer link to it (a kept index keeps
// both, gc/graph.go), all in one pipelined round trip (prefetch); a child
// fenced there is checked again on its own (guard, which waits the fence
// out), at most indexCheckConcurrency at a time. Children this request
// checked moments ago cost nothing (guardWait's scope).
//
// An image manifest has no children: its references (and the manifest
// itself) are prefetched in one round trip, so that Distribution's own
// verification, one reference after the other, finds them checked.
// Either way the manifest's own reverse link starts early (early.go).
func (d *driver) checkChildren(ctx context.Context, w *indexWatch) error {
	m, payload, err := w.manifest()
	if err != nil {
		return err
	}
	repo, _ := ctx.Value("vars.name").(string)
	children := indexChildrenOf(m)
	md := digest.FromBytes(payload) // what Distribution stores the manifest under
	self := reclaim.RepoLink{Repo: repo, Kind: reclaim.LinkManifest}
	w.digest = md
	if children == nil {
		if layout.ValidRepo(repo) {
			touches := imageManifestTouches(repo, md, m)
			w.refs = touches[1:] // the first is the manifest itself
			d.prefetch(ctx, touches)
			d.startEarly(ctx, md, self)
		}
		return nil
	}
	if len(children) == 0 {
		d.startEarly(ctx, md, self)
		return nil
	}
	if !layout.ValidRepo(repo) {
		return fmt.Errorf("%w: no repository in the request (%q)", errIndexUnchecked, repo)
	}
	childLinks := func(c digest.Digest) []reclaim.Object {
		return []reclaim.Object{
			{Blob: c, Repo: repo, Kind: reclaim.LinkManifest},
			{Blob: c, Repo: repo, Kind: reclaim.LinkLayer},
		}
	}
	touches := make([]redisstate.BlobTouch, len(children))
	for i, c := range children {
		touches[i] = redisstate.BlobTouch{Blob: c, Links: childLinks(c)}
	}
	w.refs = touches
	d.prefetch(ctx, touches)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(indexCheckConcurrency)
	for _, c := range children {
		g.Go(func() error {
			if err := gctx.Err(); err != nil {
				return err // another child failed: the PUT fails anyway
			}
			// A tombstone needs no answer here: Distribution's
			// verification stats each child right after, and the re-check
			// before the revision link (revisionrecheck.go) covers a stall.
			_, err := d.guard(gctx, c, childLinks(c))
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	d.startEarly(ctx, md, self)
	return nil
}

// manifest parses the recorded body as Distribution did.
func (w *indexWatch) manifest() (distribution.Manifest, []byte, error) {
	payload, over, complete := w.body.Copy()
	switch {
	case over:
		return nil, nil, fmt.Errorf("%w: manifest body larger than %d bytes", errIndexUnchecked, referrers.MaxManifestSize)
	case !complete:
		return nil, nil, fmt.Errorf("%w: manifest body not read to its end before the first storage call", errIndexUnchecked)
	}
	m, _, err := distribution.UnmarshalManifest(w.contentType, payload)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", errIndexUnchecked, err)
	}
	return m, payload, nil
}

// indexChildrenOf returns the distinct children of an index or a manifest
// list (empty, not nil, for one without children); nil for any other
// manifest (Distribution always verifies an image manifest's references
// itself).
func indexChildrenOf(m distribution.Manifest) []digest.Digest {
	switch m.(type) {
	case *manifestlist.DeserializedManifestList, *ocischema.DeserializedImageIndex:
	default:
		return nil
	}
	out := []digest.Digest{}
	seen := map[digest.Digest]bool{}
	for _, ref := range m.References() {
		// nothing can be stored under an invalid digest: nothing to keep
		if ref.Digest.Validate() != nil || seen[ref.Digest] {
			continue
		}
		seen[ref.Digest] = true
		out = append(out, ref.Digest)
	}
	return out
}
