package middleware

import (
	"context"

	"github.com/distribution/distribution/v3"
	"github.com/distribution/distribution/v3/manifest/schema2"
	"github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/redisstate"
)

// prefetch fence-checks several blobs (each with its links) in one round
// trip, ahead of the driver calls of this request that check them one by
// one (guardWait): a check that found no fence and no tombstone is
// recorded in the request's scope exactly as guardWait records its own, so
// those calls find it covered. Anything else (a fence, a tombstone, Redis
// failing) is left to them: they ask Redis again and wait, refuse or
// report as they always do. A prefetch therefore changes the number of
// round trips, never an outcome.
func (d *driver) prefetch(ctx context.Context, touches []redisstate.BlobTouch) {
	s := scopeOf(ctx)
	if s == nil || len(touches) == 0 || accessRecordsOff(ctx) {
		return
	}
	var todo []redisstate.BlobTouch
	for _, bt := range touches {
		if !s.covered(touchObjects(bt), d.env.opts.Dedup) {
			todo = append(todo, bt)
		}
	}
	if len(todo) == 0 {
		return
	}
	start := d.env.now()
	if len(todo) == 1 { // a plain script call, no pipeline
		gone, err := d.env.Tracker.TouchBlob(ctx, todo[0].Blob, todo[0].Links)
		if err == nil && len(gone) == 0 {
			s.record(touchObjects(todo[0]), start)
		}
		return
	}
	for i, r := range d.env.Tracker.TouchBlobs(ctx, todo) {
		if r.Err == nil && len(r.Gone) == 0 {
			s.record(touchObjects(todo[i]), start)
		}
	}
}

func touchObjects(bt redisstate.BlobTouch) []reclaim.Object {
	return append([]reclaim.Object{{Blob: bt.Blob}}, bt.Links...)
}

// imageManifestTouches are the checks the PUT of image manifest m (digest
// md) into repo makes one by one: each reference (config, layers) with
// repo's layer link to it, as Distribution's verification reads them, and
// the manifest with its revision link, which Distribution stats before it
// writes the manifest's data and link (driver.before).
func imageManifestTouches(repo string, md digest.Digest, m distribution.Manifest) []redisstate.BlobTouch {
	out := []redisstate.BlobTouch{{Blob: md, Links: []reclaim.Object{{Blob: md, Repo: repo, Kind: reclaim.LinkManifest}}}}
	seen := map[digest.Digest]bool{md: true}
	for _, ref := range m.References() {
		if ref.Digest.Validate() != nil || seen[ref.Digest] || !verified(ref) {
			continue
		}
		seen[ref.Digest] = true
		out = append(out, redisstate.BlobTouch{Blob: ref.Digest, Links: []reclaim.Object{{Blob: ref.Digest, Repo: repo, Kind: reclaim.LinkLayer}}})
	}
	return out
}

// verified reports whether Distribution's manifest verification stats ref
// (registry/storage/schema2manifesthandler.go, ocimanifesthandler.go):
// every reference but a schema2 foreign layer and an OCI non-distributable
// layer that names URLs. A layer that names URLs with any other media type
// is statted, so it is checked (and re-checked, revisionrecheck.go) like
// any other.
func verified(ref distribution.Descriptor) bool {
	switch ref.MediaType {
	case schema2.MediaTypeForeignLayer:
		return false
	case v1.MediaTypeImageLayerNonDistributable, v1.MediaTypeImageLayerNonDistributableGzip, v1.MediaTypeImageLayerNonDistributableZstd: //nolint:staticcheck // deprecated, still verified this way by Distribution
		return len(ref.URLs) == 0
	}
	return true
}
