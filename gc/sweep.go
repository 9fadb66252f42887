package gc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/opencontainers/go-digest"
)

// sweepBatch is how many objects are fenced before one re-read of the tags.
// Every fence is taken before the re-read, so a tag moved after the re-read
// had to pass the fence (and failed); one re-read per batch instead of per
// object keeps a sweep O(deletions + tags*deletions/batch).
const sweepBatch = 64

// fence takes the GC fence on o. A zero Reason means it is held.
func (rs *runState) fence(ctx context.Context, o Object) (Hold, Reason, string) {
	h, err := rs.c.tracker.Fence(ctx, o, rs.window, rs.c.cfg.FenceLease)
	switch {
	case err == nil:
		return h, reasonInvalid, ""
	case errors.Is(err, ErrRecentlyAccessed):
		return nil, RecentlyAccessed, "accessed since the plan"
	case errors.Is(err, ErrFenced):
		return nil, Fenced, ""
	default:
		return nil, CheckFailed, fmt.Sprintf("fence: %v", err)
	}
}

func (rs *runState) release(ctx context.Context, rep *Report, kind ObjectKind, d digest.Digest, h Hold) {
	// The fence also expires by its lease; a failed release only delays
	// writers of this object until then.
	if err := h.Release(context.WithoutCancel(ctx)); err != nil {
		rep.Errors = append(rep.Errors, Decision{Kind: kind, Digest: d, Reason: CheckFailed, Detail: fmt.Sprintf("release fence: %v", err)})
	}
}

// sweep destroys what the plan found deletable, one object at a time, each
// behind its fence and after a re-check. Anything that fails is kept and
// reported; the run goes on.
func (rs *runState) sweep(ctx context.Context, p *planned, rep *Report) {
	s := p.s
	d := rs.c.driver
	for _, dec := range p.decisions {
		if dec.Kind != KindBlob && !dec.Deleted() {
			rep.add(dec)
		}
	}

	// keptBy: the indexes that reference a manifest and the subject of a
	// referrer. p.manifests lists parents first.
	keptBy := keepers(s)
	deleted := map[digest.Digest]bool{}
	removed := map[digest.Digest]bool{} // blobs whose link this run removed

	for start := 0; start < len(p.manifests); {
		// A batch never holds a manifest together with one of its parents:
		// a child is fenced only once its parents are gone, so a client
		// pulling a parent that survives the sweep (pulled at the last
		// moment) never meets a fenced child, which would read as unknown.
		inBatch := map[digest.Digest]bool{}
		end := start
		for end < len(p.manifests) && end-start < sweepBatch && !anyOf(keptBy[p.manifests[end]], inBatch) {
			inBatch[p.manifests[end]] = true
			end++
		}
		batch := p.manifests[start:end]
		start = end

		held := map[digest.Digest]Hold{}
		for _, m := range batch {
			if parent, ok := survivingParent(keptBy[m], deleted); ok {
				// kept with its parent, decided without taking a fence
				rep.add(keptByParent(s, m, parent))
				continue
			}
			rel, r, detail := rs.fence(ctx, Object{Blob: m, Repo: rs.repo, Kind: LinkManifest})
			if r != reasonInvalid {
				rep.add(Decision{Kind: KindManifest, Digest: m, Reason: r, Detail: detail, Size: s.revisions[m].size})
				continue
			}
			held[m] = rel
		}
		if len(held) == 0 {
			continue
		}
		tags, tagErr := readTags(ctx, d, rs.repo)
		for _, m := range batch {
			rel, ok := held[m]
			if !ok {
				continue
			}
			dec := rs.deleteManifest(ctx, s, m, rel, tags, tagErr, rep)
			rs.release(ctx, rep, KindManifest, m, rel)
			if dec.Deleted() {
				deleted[m] = true
				removed[m] = true
			}
			rep.add(dec)
		}
	}

	// A manifest kept during the sweep keeps what it references.
	survivors := map[digest.Digest]bool{}
	for m := range s.revisions {
		if !deleted[m] {
			survivors[m] = true
		}
	}
	refd, unknown := referencedBy(s, survivors)
	for start := 0; start < len(p.layers); start += sweepBatch {
		batch := p.layers[start:min(start+sweepBatch, len(p.layers))]
		for _, l := range batch {
			if refd[l] || unknown {
				rep.add(Decision{Kind: KindLayerLink, Digest: l, Reason: Referenced, Detail: "referenced by a manifest kept during the sweep"})
				continue
			}
			rel, r, detail := rs.fence(ctx, Object{Blob: l, Repo: rs.repo, Kind: LinkLayer})
			if r != reasonInvalid {
				rep.add(Decision{Kind: KindLayerLink, Digest: l, Reason: r, Detail: detail})
				continue
			}
			dec := rs.deleteDir(ctx, KindLayerLink, l, layerLinkDir(rs.repo, l), rel)
			rs.release(ctx, rep, KindLayerLink, l, rel)
			if dec.Deleted() {
				removed[l] = true
			}
			rep.add(dec)
		}
	}

	for _, b := range sortedDigests(removed) {
		rep.add(rs.deleteBlob(ctx, b, rep))
	}
}

func (rs *runState) deleteManifest(ctx context.Context, s *snapshot, m digest.Digest, h Hold, tags map[digest.Digest][]string, tagErr error, rep *Report) Decision {
	dec := Decision{Kind: KindManifest, Digest: m, Size: s.revisions[m].size}
	if tagErr != nil {
		dec.Reason, dec.Detail = CheckFailed, fmt.Sprintf("re-read tags: %v", tagErr)
		return dec
	}
	if t := tags[m]; len(t) > 0 {
		dec.Reason, dec.Detail = Tagged, "tagged since the plan: "+t[0]
		return dec
	}
	dec = rs.deleteDir(ctx, KindManifest, m, revisionDir(rs.repo, m), h)
	dec.Size = s.revisions[m].size
	if !dec.Deleted() {
		return dec
	}
	// Upstream's delete leaves the tag history and referrers index entries
	// behind; they would point at nothing. Failures here leak a link file,
	// never data, so they are reported and the run goes on.
	for _, tag := range s.tagIndex[m] {
		if err := rs.c.driver.Delete(ctx, tagIndexDir(rs.repo, tag, m)); err != nil && !isNotFound(err) {
			rep.Errors = append(rep.Errors, Decision{Kind: KindManifest, Digest: m, Reason: DeleteFailed, Detail: fmt.Sprintf("tag %s history: %v", tag, err)})
		}
	}
	for _, sub := range s.referrers[m] {
		if err := rs.c.driver.Delete(ctx, referrerDir(rs.repo, sub, m)); err != nil && !isNotFound(err) {
			rep.Errors = append(rep.Errors, Decision{Kind: KindManifest, Digest: m, Reason: DeleteFailed, Detail: fmt.Sprintf("referrers index of %s: %v", sub, err)})
		}
	}
	return dec
}

// deleteDir re-checks that the link is there and deletes its directory
// through the wrapped driver (which removes the reverse link after), while h
// still fences it (guardedDelete).
func (rs *runState) deleteDir(ctx context.Context, kind ObjectKind, d digest.Digest, dir string, h Hold) Decision {
	dec := Decision{Kind: kind, Digest: d}
	_, err := rs.c.driver.Stat(ctx, dir+"/link")
	switch {
	case isNotFound(err):
		dec.Reason = AlreadyGone
		return dec
	case err != nil:
		dec.Reason, dec.Detail = CheckFailed, fmt.Sprintf("re-check: %v", err)
		return dec
	}
	r, detail, err := rs.guardedDelete(ctx, h, func(ctx context.Context) error { return rs.c.driver.Delete(ctx, dir) })
	if r != reasonInvalid {
		dec.Reason, dec.Detail = r, detail
		return dec
	}
	if err != nil {
		if isNotFound(err) {
			dec.Reason = AlreadyGone
			return dec
		}
		dec.Reason, dec.Detail = DeleteFailed, err.Error()
		return dec
	}
	dec.Reason = Unreferenced
	return dec
}

// deleteBlob deletes a blob whose link this run removed, if no repository
// links it any more and nobody accessed it within the window.
func (rs *runState) deleteBlob(ctx context.Context, b digest.Digest, rep *Report) Decision {
	dec := rs.blobCheck(ctx, b, func(RepoLink) bool { return false })
	if !dec.Deleted() {
		return dec
	}
	rel, r, detail := rs.fence(ctx, Object{Blob: b})
	if r != reasonInvalid {
		dec.Reason, dec.Detail = r, detail
		return dec
	}
	defer rs.release(ctx, rep, KindBlob, b, rel)
	// Re-check under the fence: a mount or push that linked the blob
	// before the fence shows up here; one after the fence is refused.
	links, err := rs.c.links.List(ctx, b)
	if err != nil {
		dec.Reason, dec.Detail = CheckFailed, fmt.Sprintf("re-check reverse links: %v", err)
		return dec
	}
	if detail, ok := malformed(links, func(RepoLink) bool { return false }); ok {
		dec.Reason, dec.Detail = CheckFailed, detail
		return dec
	}
	if len(links) > 0 {
		dec.Reason, dec.Detail = LinkedElsewhere, links[0].Repo
		if links[0].Repo == rs.repo {
			dec.Reason = StillLinked
		}
		return dec
	}
	// The directory holds the data and, since no reverse link is left, at
	// most empty reverse-link directories. The middleware leaves the
	// blob's tombstone before it deletes, so a delete cut short never
	// leaves a descriptor cache vouching for data that may be gone.
	r, detail, err = rs.guardedDelete(ctx, rel, func(ctx context.Context) error { return rs.c.driver.Delete(ctx, blobDir(b)) })
	if r != reasonInvalid {
		dec.Reason, dec.Detail = r, detail
		return dec
	}
	if err != nil {
		if !isNotFound(err) {
			dec.Reason, dec.Detail = DeleteFailed, err.Error()
			return dec
		}
		dec.Reason, dec.Size = AlreadyGone, 0
	}
	if rs.c.evictor != nil {
		if err := rs.c.evictor.Evict(ctx, b); err != nil {
			rep.Errors = append(rep.Errors, Decision{Kind: KindBlob, Digest: b, Reason: CheckFailed, Detail: fmt.Sprintf("evict descriptor cache: %v", err)})
		}
	}
	return dec
}

// A delete runs under its fence's lease, renewed while it runs. The fence
// holds for a full lease after each successful confirmation, so a delete
// abandoned half a lease after the last one leaves half a lease for the
// renewal's own round trip, the release and any difference in clock rate
// between this process and Redis.
const (
	deleteRenewPart = 3 // renew every lease/3
	deleteGracePart = 2 // abandon lease/2 after the last confirmation
	deleteMaxLeases = 5 // abandon after 5 leases in all, however renewed
)

// The causes of a guarded delete cut short.
var (
	errFenceLostDuringDelete = errors.New("fence lost while the delete ran")
	errDeleteDeadline        = errors.New("delete deadline passed")
)

// leaseClock times the renewals and deadlines of guarded deletes (Redis
// times the lease itself). Tests replace it to pass time without sleeping.
type leaseClock interface {
	Now() time.Time
	// Wait waits for d; false when ctx ended first.
	Wait(ctx context.Context, d time.Duration) bool
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// guardedDelete confirms h, then runs del while h keeps fencing the object.
// A renewer confirms h every lease/3; del's context is cancelled as soon as
// a renewal finds the fence lost (ErrFenceLost), half a lease after the last
// successful confirmation (renewals failing: the fence may run out unseen),
// or 5 leases after the start. So del never runs past its fence, however
// long the storage takes.
//
// A zero Reason means del ran to its end under the fence; err is then
// del's. Otherwise the object is kept with the reason (fence_lost,
// delete_timeout; check_failed or delete_failed when the run itself was
// stopped): del was refused, or cut short, possibly after part of the
// storage delete happened (docs/gc-protocol.md, "The fence lease").
func (rs *runState) guardedDelete(ctx context.Context, h Hold, del func(context.Context) error) (Reason, string, error) {
	if ctx.Err() != nil {
		return CheckFailed, fmt.Sprintf("run stopped: %v", context.Cause(ctx)), nil
	}
	start := rs.c.clock.Now()
	if r, detail := confirm(ctx, h); r != reasonInvalid {
		return r, detail, nil
	}
	dctx, cancel := context.WithCancelCause(ctx)
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		rs.renew(dctx, cancel, h, start)
	}()
	err := del(dctx)
	// Read before the renewer is stopped: a loss found after del returned
	// does not make a finished delete a cut-short one.
	cause := context.Cause(dctx)
	cancel(nil)
	<-exited
	if cause == nil {
		return reasonInvalid, "", err
	}
	r := DeleteFailed // the run was stopped (its lock lost)
	switch {
	case errors.Is(cause, errFenceLostDuringDelete):
		r = FenceLost
	case errors.Is(cause, errDeleteDeadline):
		r = DeleteTimeout
	}
	if err == nil {
		return r, fmt.Sprintf("%v; the storage delete had finished anyway (a driver that ignores cancellation)", cause), nil
	}
	return r, fmt.Sprintf("%v; delete cancelled: %v", cause, err), nil
}

// renew confirms h every lease/3 until ctx ends, and cancels ctx when the
// fence is lost or a deadline passes. start is when the confirmation right
// before the delete was sent.
func (rs *runState) renew(ctx context.Context, cancel context.CancelCauseFunc, h Hold, start time.Time) {
	clk, lease := rs.c.clock, rs.c.cfg.FenceLease
	hard := start.Add(deleteMaxLeases * lease)
	lastOK := start
	var lastErr error
	for {
		deadline := lastOK.Add(lease / deleteGracePart)
		if hard.Before(deadline) {
			deadline = hard
		}
		now := clk.Now()
		if !now.Before(deadline) {
			why := fmt.Sprintf("still deleting after %d fence leases", deleteMaxLeases)
			if deadline.Before(hard) {
				why = "fence not confirmed within half its lease"
				if lastErr != nil {
					why += ": " + lastErr.Error()
				}
			}
			cancel(fmt.Errorf("%w: %s", errDeleteDeadline, why))
			return
		}
		if !clk.Wait(ctx, min(lease/deleteRenewPart, deadline.Sub(now))) {
			return
		}
		now = clk.Now()
		if !now.Before(deadline) {
			continue
		}
		// Sent at now: the renewed lease runs from no earlier than that.
		rctx, rcancel := context.WithTimeout(ctx, deadline.Sub(now))
		err := h.Confirm(rctx)
		rcancel()
		switch {
		case err == nil:
			lastOK, lastErr = now, nil
		case errors.Is(err, ErrFenceLost):
			cancel(fmt.Errorf("%w: %v", errFenceLostDuringDelete, err))
			return
		case ctx.Err() != nil:
			return
		default:
			lastErr = err // Redis trouble: try again until the deadline
		}
	}
}

// confirm renews h right before the delete it guards. A zero Reason means
// the delete may go ahead.
func confirm(ctx context.Context, h Hold) (Reason, string) {
	switch err := h.Confirm(ctx); {
	case err == nil:
		return reasonInvalid, ""
	case errors.Is(err, ErrFenceLost):
		return FenceLost, err.Error()
	default:
		return CheckFailed, fmt.Sprintf("confirm fence: %v", err)
	}
}

func anyOf(ds []digest.Digest, set map[digest.Digest]bool) bool {
	for _, d := range ds {
		if set[d] {
			return true
		}
	}
	return false
}

// survivingParent returns a parent (an index, or the subject of a referrer)
// that the sweep did not delete: the manifest is then kept with it.
func survivingParent(parents []digest.Digest, deleted map[digest.Digest]bool) (digest.Digest, bool) {
	for _, p := range parents {
		if !deleted[p] {
			return p, true
		}
	}
	return "", false
}

func keptByParent(s *snapshot, m, parent digest.Digest) Decision {
	dec := Decision{Kind: KindManifest, Digest: m, Reason: IndexChild, Detail: "kept by " + parent.String(), Size: s.revisions[m].size}
	if parent == s.revisions[m].subject {
		dec.Reason = Referrer
	}
	return dec
}
