package middleware

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"

	"github.com/distribution/distribution/v3"
	v2 "github.com/distribution/distribution/v3/registry/api/v2"
	diststorage "github.com/distribution/distribution/v3/registry/storage"
	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/redisstate"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// DescriptorServiceFactory wraps every per-repository blob statter
// Distribution builds (layers and manifests), outside its blob descriptor
// cache. With the cache on, a blob HEAD makes no driver call at all, so this
// is the only place that sees it. The registry package installs it with
// registrymiddleware.RegisterOptions; it does nothing outside a request
// scope of an Env (Env.Handler), so nothing without the reclaim middleware.
//
// Each Stat:
//   - records the access (read: deduplicated; manifest PUT verification or
//     mount: fence-checked, a fence fails the PUT retryably or the mount
//     falls back to an upload);
//   - answers "blob unknown" when the blob or link is fenced;
//   - on a deletion tombstone (Env.Evict), checks the storage for real and,
//     if the object is gone, clears the stale cache entry and answers
//     "blob unknown". Upstream never clears the cache when blobs are
//     garbage-collected; without this a HEAD would say 200 after GC and a
//     re-push would skip the upload, leaving a broken image.
var DescriptorServiceFactory distribution.BlobDescriptorServiceFactory = descriptorFactory{}

type descriptorFactory struct{}

func (descriptorFactory) BlobAccessController(svc distribution.BlobDescriptorService) distribution.BlobDescriptorService {
	return &descriptors{BlobDescriptorService: svc, kind: callerKind()}
}

// callerKind tells which link set the statter being wrapped reads:
// Distribution builds it in (*repository).Blobs (layer links) or
// (*repository).Manifests (revision links) and does not say which. "" when
// the caller is unknown (another Distribution version): then both kinds are
// recorded and checked, which is safe and costs a little more.
//
// Distribution builds statters per request (several per request), so the
// answer is remembered per call site (its program counter; a binary has a
// fixed, small number of them) instead of resolving the frame's function
// name every time.
func callerKind() reclaim.LinkKind {
	var pcs [1]uintptr
	if runtime.Callers(3, pcs[:]) == 0 {
		return ""
	}
	if k, ok := callerKinds.Load(pcs[0]); ok {
		return k.(reclaim.LinkKind)
	}
	f, _ := runtime.CallersFrames(pcs[:]).Next()
	var k reclaim.LinkKind
	switch {
	case strings.HasSuffix(f.Function, "storage.(*repository).Blobs"):
		k = reclaim.LinkLayer
	case strings.HasSuffix(f.Function, "storage.(*repository).Manifests"):
		k = reclaim.LinkManifest
	}
	callerKinds.Store(pcs[0], k)
	return k
}

var callerKinds sync.Map // program counter -> reclaim.LinkKind

type descriptors struct {
	distribution.BlobDescriptorService
	kind reclaim.LinkKind
}

func (s *descriptors) Stat(ctx context.Context, dgst digest.Digest) (v1.Descriptor, error) {
	sc := scopeOf(ctx)
	if sc == nil || accessRecordsOff(ctx) || !layout.ValidDigest(dgst) {
		return s.BlobDescriptorService.Stat(ctx, dgst)
	}
	e := sc.env
	d := e.Driver.(*driver)
	info := requestOf(ctx)
	repo := info.repo
	if info.intent == intentMount && dgst == info.mount {
		repo = info.from
	}
	links := s.links(info, repo, dgst)
	var gone []redisstate.Tombstone
	switch info.intent {
	case intentReference:
		var err error
		if gone, err = d.guard(ctx, dgst, links); err != nil {
			return v1.Descriptor{}, err
		}
	case intentMount:
		g, fenced, err := d.mountCheck(ctx, dgst, links)
		if err != nil {
			return v1.Descriptor{}, err
		}
		if fenced {
			return v1.Descriptor{}, distribution.ErrBlobUnknown
		}
		gone = g
	}
	desc, err := s.BlobDescriptorService.Stat(ctx, dgst)
	if err != nil {
		return desc, err
	}
	if info.intent != intentReference && info.intent != intentMount {
		// a read is recorded once it succeeded (see driver.before)
		var fenced bool
		if fenced, gone = d.read(ctx, dgst, links); fenced {
			return v1.Descriptor{}, distribution.ErrBlobUnknown
		}
	}
	if len(gone) == 0 || !layout.ValidRepo(repo) {
		return desc, nil
	}
	return s.verify(ctx, e, repo, dgst, desc, gone)
}

// links are the link objects a Stat of dgst in repo records (or checks):
// the link set the wrapped statter serves (callerKind); if that is
// unknown, the route tells for reads (blob routes read layer links, the
// manifest route revision links), and a manifest PUT, which verifies both
// kinds, records and checks both. An extra access record only makes GC
// keep more.
func (s *descriptors) links(info requestInfo, repo string, dgst digest.Digest) []reclaim.Object {
	if !layout.ValidRepo(repo) {
		return nil
	}
	link := func(k reclaim.LinkKind) reclaim.Object { return reclaim.Object{Blob: dgst, Repo: repo, Kind: k} }
	switch {
	case s.kind != "":
		return []reclaim.Object{link(s.kind)}
	case info.intent == intentReference:
		return []reclaim.Object{link(reclaim.LinkLayer), link(reclaim.LinkManifest)}
	case info.route == v2.RouteNameManifest:
		return []reclaim.Object{link(reclaim.LinkManifest)}
	}
	return []reclaim.Object{link(reclaim.LinkLayer)}
}

// verify checks the storage behind a possibly stale cache answer: the blob
// data and at least one of repo's links to it must exist. It fails closed:
// when the storage cannot tell, the answer is a retryable error, never the
// cached "exists". gone are the tombstones the Stat's touch found.
func (s *descriptors) verify(ctx context.Context, e *Env, repo string, dgst digest.Digest, desc v1.Descriptor, gone []redisstate.Tombstone) (v1.Descriptor, error) {
	raw := e.Raw
	exists := func(p string) (bool, error) {
		_, err := raw.Stat(ctx, p)
		if errors.As(err, new(storagedriver.PathNotFoundError)) {
			return false, nil
		}
		return err == nil, err
	}
	data, err := exists(layout.BlobDataPath(dgst))
	var layer, rev bool
	if err == nil {
		layer, err = exists(layout.LayerLinkPath(repo, dgst))
	}
	if err == nil {
		rev, err = exists(layout.RevisionLinkPath(repo, dgst))
	}
	if err != nil {
		scopeOf(ctx).refuse(refusedStorage)
		return v1.Descriptor{}, fmt.Errorf("%w: check %s in %s behind the blob descriptor cache: %w", ErrRetryable, dgst, repo, err)
	}
	if data && (layer || rev) {
		// The object is back (re-pushed): the tombstones the touch saw
		// have done their job. Only those: a delete since the Stats above
		// wrote a fresh one, which must stay (ClearGone compares values).
		e.clearGone(ctx, gone)
		return desc, nil
	}
	metricStaleCache.Inc()
	// Drop the stale cache entry. Distribution's Clear would also delete
	// repo's link, which a push may have written since the checks above:
	// withCacheOnly keeps it.
	_ = s.BlobDescriptorService.Clear(withCacheOnly(ctx), dgst)
	return v1.Descriptor{}, distribution.ErrBlobUnknown
}

// RegistryOption installs DescriptorServiceFactory; pass it to Distribution's
// registrymiddleware.RegisterOptions before the app is built.
func RegistryOption() diststorage.RegistryOption {
	return diststorage.BlobDescriptorServiceFactory(DescriptorServiceFactory)
}
