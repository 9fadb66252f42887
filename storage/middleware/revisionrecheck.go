package middleware

import (
	"context"
	"errors"
	"fmt"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/internal/rlog"
	"github.com/reclaim-registry/reclaim/redisstate"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"golang.org/x/sync/errgroup"
)

// A check protects what it touched for one window from the moment it ran,
// and no longer. A manifest PUT checks what its manifest references at its
// first storage call (indexguard.go, prefetch.go, and Distribution's own
// verification, one reference after the other), but the revision link that
// makes those references referenced is written later, after the manifest's
// data. A PUT that stalls in between (it waited out a fence on its own
// manifest, for up to fencewait; a slow store; a long GC pause) can write
// that link more than a window after the check, and a collect may
// meanwhile have fenced and deleted a layer link or a child manifest that
// nothing referenced yet: the PUT would then answer 201 for an image whose
// layer or child is gone (docs/gc-protocol.md, case 11).
//
// So right before the revision link is written, every reference whose
// check in this request is older than the dedup interval (far below the
// window) is checked again: a fence-checked touch, all of them pipelined.
// A touch that is clean (no fence, no tombstone)
// proves nothing was deleted since (every delete leaves its tombstone first)
// and protects for a window from now. A touch that met a fence waits it out
// (guard); one that finds a tombstone, there or after the wait, looks at the
// storage, and a reference that is gone fails the PUT with a retryable
// error: the client's retry is verified afresh and pushes what is missing.

// refsBeforeRevision re-checks the references of the manifest this request
// is PUTting, right before its revision link p is written (see above).
func (d *driver) refsBeforeRevision(ctx context.Context, p layout.Path) error {
	w, _ := ctx.Value(indexWatchKey{}).(*indexWatch)
	if w == nil || w.digest != p.Digest || accessRecordsOff(ctx) {
		return nil
	}
	s := scopeOf(ctx)
	var stale []redisstate.BlobTouch
	for _, bt := range w.refs {
		if !s.covered(touchObjects(bt), d.env.opts.Dedup) {
			stale = append(stale, bt)
		}
	}
	if len(stale) == 0 {
		return nil // the usual case: checked moments ago
	}
	d.prefetch(ctx, stale) // one round trip for all; clean answers are recorded
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(indexCheckConcurrency)
	for _, bt := range stale {
		if s.covered(touchObjects(bt), d.env.opts.Dedup) {
			continue
		}
		g.Go(func() error {
			gone, err := d.guard(gctx, bt.Blob, bt.Links)
			if err != nil || len(gone) == 0 {
				return err
			}
			return d.stillThere(gctx, referencePath(bt), p.Digest)
		})
	}
	return g.Wait()
}

// referencePath is the forward link a manifest's reference lives by in its
// repository: a child manifest's revision link, a layer's layer link.
func referencePath(bt redisstate.BlobTouch) string {
	l := bt.Links[0]
	return layout.ForwardLinkPath(l.Repo, l.Blob, l.Kind)
}

// stillThere fails the write that depends on path unless the storage shows
// it: its check found a tombstone, so a delete of it began at some point.
// errCollected marks a stillThere failure where the storage showed the
// object gone (not a storage error): a link already written to it is
// dangling and may be withdrawn. Its text is empty: it only marks.
var errCollected = errors.New("")

func (d *driver) stillThere(ctx context.Context, path string, writing digest.Digest) error {
	_, err := d.StorageDriver.Stat(ctx, path)
	if err == nil {
		return nil
	}
	scopeOf(ctx).refuse(refusedStorage)
	if errors.As(err, new(storagedriver.PathNotFoundError)) {
		scopeOf(ctx).refuse(refusedCollected)
		metricRefusals.WithLabelValues("collected").Inc()
		rlog.From(ctx).WithField("path", path).Info("reclaim: link write refused, what it depends on was garbage-collected meanwhile")
		return fmt.Errorf("%w: %s was garbage-collected before the link to %s was written%w", ErrRetryable, path, writing, errCollected)
	}
	return fmt.Errorf("%w: check %s before the link to %s: %w", ErrRetryable, path, writing, err)
}
