package gc

import (
	"context"
	"errors"
	"fmt"

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
// still fences it.
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
	if r, detail := confirm(ctx, h); r != reasonInvalid {
		dec.Reason, dec.Detail = r, detail
		return dec
	}
	if err := rs.c.driver.Delete(ctx, dir); err != nil {
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
	if r, detail := confirm(ctx, rel); r != reasonInvalid {
		dec.Reason, dec.Detail = r, detail
		return dec
	}
	if err := rs.c.driver.Delete(ctx, blobDir(b)); err != nil {
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
