package middleware

import (
	"context"
	"errors"
	"fmt"
	"time"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/internal/pause"
	"github.com/reclaim-registry/reclaim/internal/rlog"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/redisstate"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// ErrRetryable marks errors a client should retry (Handler answers 503).
var ErrRetryable = errors.New("storage: retry later")

// pathLinks is the link object of a forward link path, nil for any other
// path: a driver call on a link records (or checks) the link with its blob.
func pathLinks(p layout.Path) []reclaim.Object {
	if isLink(p.Kind) {
		return []reclaim.Object{linkObject(p)}
	}
	return nil
}

// extra returns the objects a request adds to every fence check: the layer
// link an upload commit or a mount is about to write. Checking it together
// with the blob saves the separate round trip the link write would cost.
func extra(info requestInfo, blob digest.Digest) []reclaim.Object {
	if (info.intent == intentCommit || info.intent == intentMount) && layout.ValidRepo(info.repo) {
		return []reclaim.Object{{Blob: blob, Repo: info.repo, Kind: reclaim.LinkLayer}}
	}
	return nil
}

// before is the common entry for driver calls on a link or blob data path.
// An operation about to make the object referenced (manifest PUT
// verification, upload commit, mount) is fence-checked before it proceeds.
// A read is recorded after it succeeded (readAfter): reads create no
// references (a later manifest PUT is checked on its own), the access is
// still recorded before the client learns the answer, and a read of
// something that does not exist costs no Redis round trip.
func (d *driver) before(ctx context.Context, path string, p layout.Path) (readAfter bool, err error) {
	info := requestOf(ctx)
	links := pathLinks(p)
	switch info.intent {
	case intentReference:
		if p.Kind == layout.PathBlobData && layout.ValidRepo(info.repo) && !scopeOf(ctx).reachedByLink(p.Digest) {
			// Blob data a manifest PUT did not reach through a link is the
			// manifest itself (Distribution stats it before writing it and
			// its revision link): check the revision link now too, so the
			// link write that follows needs no round trip of its own.
			links = append(links, reclaim.Object{Blob: p.Digest, Repo: info.repo, Kind: reclaim.LinkManifest})
		}
		// A tombstone needs no answer here: the storage call this guards
		// asks the storage itself, and a stall after it is the link
		// write's to catch (putLink, dataBehind).
		_, err := d.guard(ctx, p.Digest, links)
		return false, err
	case intentCommit:
		_, err := d.guard(ctx, p.Digest, append(links, extra(info, p.Digest)...)) // tombstone: as above
		return false, err
	case intentMount:
		_, fenced, err := d.mountCheck(ctx, p.Digest, append(links, extra(info, p.Digest)...))
		if fenced {
			return false, storagedriver.PathNotFoundError{Path: path, DriverName: "reclaim"}
		}
		return false, err
	}
	return true, nil
}

// after records a successful read; a fenced object answers "not found".
func (d *driver) after(ctx context.Context, path string, p layout.Path) error {
	if fenced, _ := d.read(ctx, p.Digest, pathLinks(p)); fenced {
		return storagedriver.PathNotFoundError{Path: path, DriverName: "reclaim"}
	}
	return nil
}

// guard is the fence check of an operation that will make blob (and links)
// referenced: record access unless fenced. A fence is waited out for up to
// FenceWait; then the operation fails with a retryable error and never
// proceeds.
//
// gone holds the deletion tombstones found on the objects, if any
// (descriptors.go).
func (d *driver) guard(ctx context.Context, blob digest.Digest, links []reclaim.Object) (gone []redisstate.Tombstone, err error) {
	return d.guardWait(ctx, blob, links, d.env.opts.FenceWait)
}

// mountCheck is the fence check of a mount. It does not wait: a fence
// makes the source unknown (fenced), the client uploads instead, and that
// is no refusal of the request.
func (d *driver) mountCheck(ctx context.Context, blob digest.Digest, links []reclaim.Object) (gone []redisstate.Tombstone, fenced bool, err error) {
	gone, err = d.guardWait(ctx, blob, links, 0)
	if errors.Is(err, reclaim.ErrFenced) {
		scopeOf(ctx).unrefuse()
		return nil, true, nil
	}
	return gone, false, err
}

// guardWait is guard with an explicit wait.
//
// A check is reused only within its own request (scope.covered), never from
// the process-wide read dedup: another instance may have deleted a link
// since a pull of this process looked, and only Redis knows (a tombstone).
// Within a request, a check that found no fence and no tombstone set the
// access time, and GC refuses to fence anything accessed within its window,
// so the request's later steps need no second round trip.
func (d *driver) guardWait(ctx context.Context, blob digest.Digest, links []reclaim.Object, wait time.Duration) (gone []redisstate.Tombstone, err error) {
	if accessRecordsOff(ctx) {
		return nil, nil
	}
	if err := d.indexChildren(ctx); err != nil { // a manifest PUT checks its index children first
		return nil, err
	}
	objs := append([]reclaim.Object{{Blob: blob}}, links...)
	s := scopeOf(ctx)
	s.noteLinks(links)
	s.waitEarlyCheck(blob) // the same check may be in flight (early.go)
	if s.covered(objs, d.env.opts.Dedup) {
		return nil, nil
	}
	deadline := time.Now().Add(wait)
	waited := false
	for {
		start := d.env.now()
		gone, err := d.env.Tracker.TouchBlob(ctx, blob, links)
		if err == nil {
			if waited {
				metricFenceWaits.WithLabelValues("cleared").Inc()
			}
			if len(gone) == 0 {
				// a tombstone must be seen by the next check too: only a
				// clean answer is remembered
				s.record(objs, start)
			}
			return gone, nil
		}
		if !errors.Is(err, reclaim.ErrFenced) || !time.Now().Before(deadline) {
			return nil, refuse(ctx, blob, err)
		}
		waited = true
		if err := pause.For(ctx, d.env.opts.FencePoll); err != nil {
			return nil, err
		}
	}
}

// refuse fails the request's fence check: it answers 503 (Handler).
func refuse(ctx context.Context, blob digest.Digest, err error) error {
	if errors.Is(err, reclaim.ErrFenced) {
		scopeOf(ctx).refuse(refusedFenced)
		metricFenceWaits.WithLabelValues("refused").Inc()
		metricRefusals.WithLabelValues("fenced").Inc()
		rlog.From(ctx).WithField("blob", blob).Info("reclaim: write refused, object is being garbage-collected")
	} else {
		scopeOf(ctx).refuse(refusedRedis)
		metricRefusals.WithLabelValues("redis").Inc()
	}
	return fmt.Errorf("%w: %w", ErrRetryable, err)
}

// read records a pull's access, best effort and deduplicated per process.
// It reports whether the blob or link is fenced (being deleted): the caller
// then answers "not found" instead of serving something half-deleted.
// gone holds the deletion tombstones found, if any (see descriptors.go).
func (d *driver) read(ctx context.Context, blob digest.Digest, links []reclaim.Object) (fenced bool, gone []redisstate.Tombstone) {
	if accessRecordsOff(ctx) {
		return false, nil
	}
	objs := append([]reclaim.Object{{Blob: blob}}, links...)
	if d.env.dedup.recent(objs) {
		metricTouchesDeduped.Inc()
		return false, nil
	}
	start := time.Now()
	gone, err := d.env.Tracker.TouchBlob(ctx, blob, links)
	switch {
	case errors.Is(err, reclaim.ErrFenced):
		return true, nil
	case err != nil:
		// serving comes first: the tracker has noted the gap
		return false, nil
	}
	if len(gone) == 0 {
		// never remember a tombstone as "recent": a concurrent read of
		// the same blob must see it too and check the storage
		d.env.dedup.record(objs, start)
	}
	return false, gone
}
