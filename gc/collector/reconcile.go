package collector

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/gc"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/reclaim/gcrun"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// reconcile runs first in a real run that holds its repository lock: every
// interrupted run of the repository not yet reconciled is looked at again
// (docs/gc-protocol.md, "Interrupted runs"). What it may have half done is
// re-checked in storage, blobs it unlinked that are left with data and no
// reverse link are queued for review, and the run's report says so. It
// deletes nothing: the reclaimer's review does, behind its own fence.
func (r *run) reconcile(ctx context.Context) {
	if r.log == nil {
		return
	}
	c := r.c
	runs, err := c.recorder.RepositoryRuns(ctx, r.pol.Repo, "run "+r.rep.RunID)
	if err != nil {
		r.rep.Errors = append(r.rep.Errors, gc.Decision{Kind: reclaim.KindRun, Reason: reclaim.ReasonCheckFailed, Detail: fmt.Sprintf("reconcile interrupted runs: %v", err)})
		return
	}
	for _, st := range runs {
		if st.Status != gcrun.StatusInterrupted || st.ReconciledBy != "" || st.ID == r.rep.RunID {
			continue
		}
		rec, err := r.recheck(ctx, st)
		if err == nil {
			_, err = c.recorder.MarkReconciled(ctx, r.pol.Repo, st.ID, r.rep.RunID)
		}
		if err != nil {
			// Not marked: the next run reconciles it again.
			r.rep.Errors = append(r.rep.Errors, gc.Decision{Kind: reclaim.KindRun, Reason: reclaim.ReasonCheckFailed,
				Detail: fmt.Sprintf("reconcile interrupted run %s: %v", st.ID, err)})
		}
		r.rep.Reconciled = append(r.rep.Reconciled, rec)
	}
}

// recheck looks again at what interrupted run st may have half done: the
// last object it wrote ahead of a delete, and every blob whose link it
// removed or was about to remove.
func (r *run) recheck(ctx context.Context, st gcrun.State) (Reconciliation, error) {
	rec := Reconciliation{RunID: st.ID, Step: st.Step, LastObject: lastObject(st),
		DeletionsStarted: st.DeletionsStarted, Rechecked: []Recheck{}, OrphansQueued: []digest.Digest{}}
	blobs := map[digest.Digest]bool{}
	for _, u := range st.Unlinked {
		if d, err := digest.Parse(u); err == nil {
			blobs[d] = true
		}
	}
	if o := rec.LastObject; o != nil && o.Kind != reclaim.KindBlob {
		f, err := r.recheckLink(ctx, *o)
		if err != nil {
			return rec, err
		}
		rec.Rechecked = append(rec.Rechecked, Recheck{ObjectRef: *o, Finding: f})
	} else if o != nil {
		blobs[o.Digest] = true
	}
	var orphans []digest.Digest
	for _, b := range slices.Sorted(maps.Keys(blobs)) {
		f, orphan, err := r.recheckBlob(ctx, b)
		if err != nil {
			return rec, err
		}
		rec.Rechecked = append(rec.Rechecked, Recheck{ObjectRef: ObjectRef{Kind: reclaim.KindBlob, Digest: b}, Finding: f})
		if orphan {
			orphans = append(orphans, b)
		}
	}
	if len(orphans) == 0 {
		return rec, nil
	}
	if r.c.cfg.Review == nil {
		return rec, fmt.Errorf("%d orphaned blobs and no review queue to queue them on; `registry gc sweep` finds them", len(orphans))
	}
	if err := r.c.cfg.Review.Enqueue(ctx, 0, orphans...); err != nil {
		return rec, fmt.Errorf("queue orphaned blobs for review: %w", err)
	}
	rec.OrphansQueued = orphans
	return rec, nil
}

// recheckLink: the link's delete may have been cut short after the forward
// link and before its reverse link (a leak, never a loss).
func (r *run) recheckLink(ctx context.Context, o ObjectRef) (string, error) {
	k := reclaim.LinkLayer
	if o.Kind == reclaim.KindManifest {
		k = reclaim.LinkManifest
	}
	repo := r.pol.Repo
	_, err := r.c.driver.Stat(ctx, layout.ForwardLinkPath(repo, o.Digest, k))
	switch {
	case err == nil:
		return "link present: its delete did not happen, or the link was pushed again", nil
	case !layout.IsNotFound(err):
		return "", fmt.Errorf("re-check %s %s: %w", o.Kind, o.Digest, err)
	}
	links, err := r.c.links.List(ctx, o.Digest)
	if err != nil {
		return "", fmt.Errorf("re-check reverse links of %s: %w", o.Digest, err)
	}
	if slices.ContainsFunc(links, func(l reclaim.RepoLink) bool { return l.Repo == repo && l.Kind == k }) {
		return "link deleted, its reverse link left: a leak that keeps the blob (`registry linkdb verify` reports it, `linkdb rebuild` removes it)", nil
	}
	if o.Kind == reclaim.KindManifest {
		return "revision deleted; its tag history and referrers entries, removed after it, may be left", nil
	}
	return "link deleted", nil
}

// recheckBlob: a blob whose link the run removed is an orphan when its
// data is there and no reverse link is left.
func (r *run) recheckBlob(ctx context.Context, b digest.Digest) (string, bool, error) {
	_, err := r.c.driver.Stat(ctx, layout.BlobDataPath(b))
	switch {
	case layout.IsNotFound(err):
		return "blob data gone", false, nil
	case err != nil:
		return "", false, fmt.Errorf("re-check blob %s: %w", b, err)
	}
	links, err := r.c.links.List(ctx, b)
	if err != nil {
		return "", false, fmt.Errorf("re-check reverse links of %s: %w", b, err)
	}
	if len(links) > 0 {
		return "still linked by " + links[0].Repo + ": kept", false, nil
	}
	return "orphaned: data and no reverse link; queued for review", true, nil
}
