package collector

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/gc"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/reclaim/trashentry"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// reasonInvalid is the zero reclaim.Reason: none (a fence held, a delete
// that may go ahead).
const reasonInvalid reclaim.Reason = 0

// deleter deletes objects, each behind its fence and after a re-check: the
// delete phase of a collection and the reclaimer's review share it.
type deleter struct {
	c   *Collector
	pol policy
	log *runLog // nil: no run record (the reclaimer)
	// by and runID name the deleter in the trash entries it writes.
	by, runID string
	// purge: delete for good, holding nothing in the trash (Orphans.Purge).
	purge bool
	// sizes are the blob sizes the plan read, for the trash entries of
	// layer links (whose size the snapshot does not know).
	sizes map[digest.Digest]int64
	// planned is the clock reading a collect's plan started from (zero:
	// the reclaimer, which decides each blob afresh); window is the
	// fence window of the current batch (fenceWindow).
	planned time.Time
	window  time.Duration
}

// fenceWindow sets the window the fences of the next batch are refused
// within: the protection window, reaching back to the window before the
// plan. The plan kept what was accessed within W of its start; what was
// accessed after it (a push of a manifest that needs a planned layer link,
// a tag moved onto a planned manifest) is not in the plan, and a delete
// phase longer than W (a slow store, stalls, many objects) would otherwise
// fence it: the re-read under the fence keeps it, but a pull meets the
// fence meanwhile and answers 404. One clock read per batch.
func (dl *deleter) fenceWindow(ctx context.Context) {
	dl.window = dl.pol.Window
	if dl.planned.IsZero() {
		return
	}
	now, err := dl.c.clockNow(ctx)
	if err != nil {
		return // the fence itself will meet the same Redis
	}
	if since := now.Sub(dl.planned); since > 0 {
		dl.window += since
	}
}

// hold writes the trash's hold for an object about to be removed; the
// zero entry (and no error) when the trash is off or this is a purge.
func (dl *deleter) hold(ctx context.Context, kind reclaim.ObjectKind, d digest.Digest, size int64) (trashentry.Entry, error) {
	if dl.c.cfg.Trash == nil || dl.purge {
		return trashentry.Entry{}, nil
	}
	e, err := dl.c.cfg.Trash.Hold(ctx, trashentry.Entry{Kind: kind, Repo: dl.pol.Repo, Digest: d, Size: size,
		Reason: reclaim.ReasonUnreferenced.String(), By: dl.by, Run: dl.runID})
	if err != nil {
		return e, fmt.Errorf("write trash hold: %w", err)
	}
	return e, nil
}

// unhold drops the hold of a delete that did not happen.
func (dl *deleter) unhold(ctx context.Context, e trashentry.Entry, dec *gc.Decision) {
	if e.ID == "" {
		return
	}
	if dec.Reason == reclaim.ReasonUnreferenced {
		dec.Trash = e.ID
		return
	}
	if err := dl.c.cfg.Trash.Drop(context.WithoutCancel(ctx), e); err != nil {
		dec.Detail += fmt.Sprintf("; its trash hold %s is left (it only keeps the data longer): %v", e.ID, err)
	}
}

// fence takes the GC fence on o. A zero Reason means it is held.
func (dl *deleter) fence(ctx context.Context, o reclaim.Object) (reclaim.Hold, reclaim.Reason, string) {
	window := dl.window
	if window <= 0 {
		window = dl.pol.Window
	}
	h, err := dl.c.tracker.Fence(ctx, o, window, dl.c.cfg.FenceLease)
	switch {
	case err == nil:
		return h, reasonInvalid, ""
	case errors.Is(err, reclaim.ErrRecentlyAccessed):
		return nil, reclaim.ReasonRecentlyAccessed, "accessed since the plan"
	case errors.Is(err, reclaim.ErrFenced):
		return nil, reclaim.ReasonFenced, ""
	default:
		return nil, reclaim.ReasonCheckFailed, fmt.Sprintf("fence: %v", err)
	}
}

func (dl *deleter) release(ctx context.Context, rep *Report, kind reclaim.ObjectKind, d digest.Digest, h reclaim.Hold) {
	// The fence also expires by its lease; a failed release only delays
	// writers of this object until then.
	if err := h.Release(context.WithoutCancel(ctx)); err != nil {
		rep.Errors = append(rep.Errors, gc.Decision{Kind: kind, Digest: d, Reason: reclaim.ReasonCheckFailed, Detail: fmt.Sprintf("release fence: %v", err)})
	}
}

func (dl *deleter) deleteManifest(ctx context.Context, s *gc.Snapshot, m digest.Digest, h reclaim.Hold, tags map[digest.Digest][]string, tagErr error, rep *Report) gc.Decision {
	dec := gc.Decision{Kind: reclaim.KindManifest, Digest: m, Size: s.Revisions[m].Size}
	if tagErr != nil {
		dec.Reason, dec.Detail = reclaim.ReasonCheckFailed, fmt.Sprintf("re-read tags: %v", tagErr)
		return dec
	}
	if t := tags[m]; len(t) > 0 {
		dec.Reason, dec.Detail = reclaim.ReasonTagged, "tagged since the plan: "+t[0]
		return dec
	}
	if r, detail := dl.pinnedNow(ctx, m); r != reasonInvalid {
		dec.Reason, dec.Detail = r, detail
		return dec
	}
	dec = dl.deleteDir(ctx, reclaim.KindManifest, m, s.Revisions[m].Size, layout.RevisionDir(dl.pol.Repo, m), h)
	if !dec.Deleted() {
		return dec
	}
	// Upstream's delete leaves the tag history and referrers index entries
	// behind; they would point at nothing. Failures here leak a link file,
	// never data, so they are reported and the run goes on.
	for _, tag := range s.TagIndex[m] {
		dl.deleteEntry(ctx, rep, m, path.Dir(layout.TagIndexPath(dl.pol.Repo, tag, m)), "tag "+tag+" history")
	}
	for _, sub := range referrerEntries(s, m) {
		dl.deleteEntry(ctx, rep, m, path.Dir(layout.ReferrerLinkPath(dl.pol.Repo, sub, m)), "referrers index of "+sub.String())
	}
	return dec
}

// referrerEntries are the subjects under which m may be listed in the
// referrers index: those the snapshot found, and m's own subject. A PUT of
// m writes its entry after its revision link, so a snapshot taken between
// the two sees the manifest without its entry; the entry then lands before
// this delete, and only m's subject names it (found by TestSoakS3: a
// referrer listed for a tagged subject that no longer pulled).
func referrerEntries(s *gc.Snapshot, m digest.Digest) []digest.Digest {
	subs := s.Referrers[m]
	if sub := s.Revisions[m].Subject; sub != "" && !slices.Contains(subs, sub) {
		subs = append(slices.Clone(subs), sub)
	}
	return subs
}

// pinnedNow re-checks the pins of m under its fence, right before the
// delete: a pin stored after the plan (or after the facts were read) keeps
// m. A pin store that stores a pin and then checks the fence (the
// registry's does) is thus never answered "pinned" for a manifest a run
// deletes: either the run reads the pin here, or the store sees the fence.
func (dl *deleter) pinnedNow(ctx context.Context, m digest.Digest) (reclaim.Reason, string) {
	if dl.c.pinner == nil {
		return reasonInvalid, ""
	}
	pinned, err := dl.c.pinner.Pinned(ctx, dl.pol.Repo, m)
	switch {
	case err != nil:
		return reclaim.ReasonCheckFailed, fmt.Sprintf("re-check pin: %v", err)
	case pinned:
		return reclaim.ReasonPinned, "pinned since the plan"
	}
	return reasonInvalid, ""
}

// deleteEntry deletes an index entry of a deleted manifest; a failure is
// reported, "not found" is success.
func (dl *deleter) deleteEntry(ctx context.Context, rep *Report, m digest.Digest, dir, what string) {
	if err := dl.c.driver.Delete(ctx, dir); err != nil && !layout.IsNotFound(err) {
		rep.Errors = append(rep.Errors, gc.Decision{Kind: reclaim.KindManifest, Digest: m, Reason: reclaim.ReasonDeleteFailed, Detail: fmt.Sprintf("%s: %v", what, err)})
	}
}

// deleteDir re-checks that the link is there and deletes its directory
// through the wrapped driver (which removes the reverse link after), while h
// still fences it (guardedDelete).
func (dl *deleter) deleteDir(ctx context.Context, kind reclaim.ObjectKind, d digest.Digest, size int64, dir string, h reclaim.Hold) (dec gc.Decision) {
	dec = gc.Decision{Kind: kind, Digest: d, Size: size}
	_, err := dl.c.driver.Stat(ctx, dir+"/link")
	switch {
	case layout.IsNotFound(err):
		dec.Reason = reclaim.ReasonAlreadyGone
		return dec
	case err != nil:
		dec.Reason, dec.Detail = reclaim.ReasonCheckFailed, fmt.Sprintf("re-check: %v", err)
		return dec
	}
	if err := dl.log.ahead(ctx, kind, d); err != nil {
		dec.Reason, dec.Detail = reclaim.ReasonCheckFailed, err.Error()
		return dec
	}
	// The hold first, the delete second: a crash between them leaves a
	// hold on a linked object (data kept longer), never a removed object
	// without its record.
	e, err := dl.hold(ctx, kind, d, size)
	if err != nil {
		dec.Reason, dec.Detail = reclaim.ReasonCheckFailed, err.Error()
		return dec
	}
	defer dl.unhold(ctx, e, &dec)
	r, detail, err := dl.guardedDelete(ctx, h, func(ctx context.Context) error { return dl.c.driver.Delete(ctx, dir) })
	switch {
	case r != reasonInvalid:
		dec.Reason, dec.Detail = r, detail
	case layout.IsNotFound(err):
		dec.Reason = reclaim.ReasonAlreadyGone
	case err != nil:
		dec.Reason, dec.Detail = reclaim.ReasonDeleteFailed, err.Error()
	default:
		dec.Reason = reclaim.ReasonUnreferenced
	}
	return dec
}

// deleteBlob deletes a blob whose link was removed, if no repository links
// it any more and nobody accessed it within the window.
func (dl *deleter) deleteBlob(ctx context.Context, b digest.Digest, rep *Report) gc.Decision {
	dec := gc.DecideBlob(dl.c.gatherBlob(ctx, dl.pol, b), dl.pol.Policy, b)
	if !dec.Deleted() {
		return dec
	}
	h, r, detail := dl.fence(ctx, reclaim.Object{Blob: b})
	if r != reasonInvalid {
		dec.Reason, dec.Detail = r, detail
		return dec
	}
	defer dl.release(ctx, rep, reclaim.KindBlob, b, h)
	// Re-check under the fence: a mount or push that linked the blob
	// before the fence shows up here; one after the fence is refused.
	links, err := linksFor(ctx, dl.c.links, b, dl.pol.Repo)
	if err != nil {
		dec.Reason, dec.Detail = reclaim.ReasonCheckFailed, fmt.Sprintf("re-check reverse links: %v", err)
		return dec
	}
	if r, detail := gc.LinksKeep(links, dl.pol.Repo); r != reasonInvalid {
		dec.Reason, dec.Detail = r, detail
		return dec
	}
	// The directory holds the data and, since no reverse link is left, at
	// most empty reverse-link directories. The middleware leaves the
	// blob's tombstone before it deletes, so a delete cut short never
	// leaves a descriptor cache vouching for data that may be gone.
	if err := dl.log.ahead(ctx, reclaim.KindBlob, b); err != nil {
		dec.Reason, dec.Detail = reclaim.ReasonCheckFailed, err.Error()
		return dec
	}
	if dl.c.cfg.Trash != nil && !dl.purge {
		// nothing links or holds it: held instead of deleted, its data
		// freed when the hold expires and is purged
		e, err := dl.hold(ctx, reclaim.KindBlob, b, dec.Size)
		if err != nil {
			dec.Reason, dec.Detail = reclaim.ReasonCheckFailed, err.Error()
			return dec
		}
		dec.Reason, dec.Detail, dec.Trash = reclaim.ReasonInTrash, "held until "+e.Expires.UTC().Format(time.RFC3339), e.ID
		return dec
	}
	r, detail, err = dl.guardedDelete(ctx, h, func(ctx context.Context) error { return dl.c.driver.Delete(ctx, layout.BlobDir(b)) })
	switch {
	case r != reasonInvalid:
		dec.Reason, dec.Detail = r, detail+dl.landedAnyway(ctx, b)
		return dec
	case layout.IsNotFound(err):
		dec.Reason, dec.Size = reclaim.ReasonAlreadyGone, 0
	case err != nil:
		dec.Reason, dec.Detail = reclaim.ReasonDeleteFailed, err.Error()
		return dec
	}
	dl.evict(ctx, b, rep)
	return dec
}

// landedAnyway looks at a blob whose delete was called off after it was
// sent: the store may have executed it all the same, after the fence was
// lost, and a writer that passed the lost fence in between (its Stat still
// found the data) linked data that is now gone. Nothing brings the data
// back (docs/gc-protocol.md, "What cancellation cannot do"); this makes
// the loss visible in the run's report instead of silent.
func (dl *deleter) landedAnyway(ctx context.Context, b digest.Digest) string {
	_, err := dl.c.driver.Stat(context.WithoutCancel(ctx), layout.BlobDataPath(b))
	if !layout.IsNotFound(err) {
		return ""
	}
	return "; the data is gone all the same (the delete landed after its fence was lost): an image pushed meanwhile that links this blob is broken; run registry linkdb verify (broken_forward) and push it again"
}

func (dl *deleter) evict(ctx context.Context, b digest.Digest, rep *Report) {
	if dl.c.evictor == nil {
		return
	}
	if err := dl.c.evictor.Evict(ctx, b); err != nil {
		rep.Errors = append(rep.Errors, gc.Decision{Kind: reclaim.KindBlob, Digest: b, Reason: reclaim.ReasonCheckFailed, Detail: fmt.Sprintf("evict descriptor cache: %v", err)})
	}
}
