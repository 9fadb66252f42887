package collector

import (
	"context"
	"maps"
	"slices"

	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/gc"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/reclaim/gcrun"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// deleteBatch is how many objects are fenced before one re-read of the tags.
// Every fence is taken before the re-read, so a tag moved after the re-read
// had to pass the fence (and failed); one re-read per batch instead of per
// object keeps a delete phase O(deletions + tags*deletions/batch).
const deleteBatch = 64

// deletePhase destroys what the plan found deletable, one object at a time, each
// behind its fence and after a re-check. Anything that fails is kept and
// reported; the run goes on.
func (dl *deleter) deletePhase(ctx context.Context, s *gc.Snapshot, p *gc.Outcome, rep *Report) {
	for _, dec := range p.Decisions {
		if dec.Kind != reclaim.KindBlob && !dec.Deleted() {
			rep.add(dec)
		}
	}
	removed := map[digest.Digest]bool{} // blobs whose link this run removed
	dl.sizes = map[digest.Digest]int64{}
	for _, dec := range p.Decisions {
		if dec.Kind == reclaim.KindBlob && dec.Size > 0 {
			dl.sizes[dec.Digest] = dec.Size
		}
	}
	dl.log.step(ctx, gcrun.StepManifests)
	deleted := dl.deleteManifests(ctx, s, p, rep, removed)
	dl.log.step(ctx, gcrun.StepLayerLinks)
	dl.deleteLayers(ctx, s, p, rep, deleted, removed)
	dl.log.step(ctx, gcrun.StepBlobs)
	for _, b := range slices.Sorted(maps.Keys(removed)) {
		rep.add(dl.deleteBlob(ctx, b, rep))
	}
}

// deleteManifests deletes the planned manifests, parents first, a batch at a
// time, and returns the ones it deleted.
func (dl *deleter) deleteManifests(ctx context.Context, s *gc.Snapshot, p *gc.Outcome, rep *Report, removed map[digest.Digest]bool) map[digest.Digest]bool {
	keptBy := s.Parents() // the indexes that list a manifest, a referrer's subject
	deleted := map[digest.Digest]bool{}
	for start := 0; start < len(p.Manifests); {
		batch := nextBatch(p.Manifests[start:], keptBy)
		start += len(batch)
		held := dl.fenceManifests(ctx, s, batch, keptBy, deleted, rep)
		if len(held) == 0 {
			continue
		}
		tags, tagErr := readTags(ctx, dl.c.driver, dl.pol.Repo)
		since := dl.readSincePlan(ctx, s, deleted)
		gone := dl.deleteHeld(ctx, s, rep, reclaim.KindManifest, batch, held, since, func(m digest.Digest, h reclaim.Hold) gc.Decision {
			return dl.deleteManifest(ctx, s, m, h, tags, tagErr, rep)
		})
		for _, m := range gone {
			deleted[m], removed[m] = true, true
		}
	}
	return deleted
}

// nextBatch is the longest prefix of ms, up to deleteBatch, that holds no
// manifest together with one of its parents: a child is fenced only once its
// parents are gone, so a client pulling a parent that survives the delete phase
// (pulled at the last moment) never meets a fenced child, which would read
// as unknown.
func nextBatch(ms []digest.Digest, keptBy map[digest.Digest][]digest.Digest) []digest.Digest {
	inBatch := map[digest.Digest]bool{}
	end := 0
	for end < len(ms) && end < deleteBatch && !anyOf(keptBy[ms[end]], inBatch) {
		inBatch[ms[end]] = true
		end++
	}
	return ms[:end]
}

// fenceManifests takes the fence of every manifest of the batch whose
// parents are all gone; the others are decided and reported here.
func (dl *deleter) fenceManifests(ctx context.Context, s *gc.Snapshot, batch []digest.Digest,
	keptBy map[digest.Digest][]digest.Digest, deleted map[digest.Digest]bool, rep *Report) map[digest.Digest]reclaim.Hold {
	held := map[digest.Digest]reclaim.Hold{}
	dl.fenceWindow(ctx)
	for _, m := range batch {
		if parent, ok := survivingParent(keptBy[m], deleted); ok {
			// kept with its parent, decided without taking a fence
			rep.add(keptByParent(s, m, parent))
			continue
		}
		h, r, detail := dl.fence(ctx, reclaim.Object{Blob: m, Repo: dl.pol.Repo, Kind: reclaim.LinkManifest})
		if r != reasonInvalid {
			rep.add(gc.Decision{Kind: reclaim.KindManifest, Digest: m, Reason: r, Detail: detail, Size: s.Revisions[m].Size})
			continue
		}
		held[m] = h
	}
	return held
}

// deleteLayers deletes the planned layer links that no manifest kept during
// the delete phase references, nor a manifest that appeared since the plan: a
// batch of fences is taken, then the revisions are re-read
// (readSincePlan), then the batch is deleted.
func (dl *deleter) deleteLayers(ctx context.Context, s *gc.Snapshot, p *gc.Outcome, rep *Report, deleted, removed map[digest.Digest]bool) {
	survivors := map[digest.Digest]bool{}
	for m := range s.Revisions {
		if !deleted[m] {
			survivors[m] = true
		}
	}
	refd, unknown := s.ReferencedBy(survivors)
	var todo []digest.Digest
	for _, l := range p.Layers {
		if refd[l] || unknown {
			rep.add(gc.Decision{Kind: reclaim.KindLayerLink, Digest: l, Reason: reclaim.ReasonReferenced, Detail: "referenced by a manifest kept during the sweep"}) // the detail is output: unchanged
			continue
		}
		todo = append(todo, l)
	}
	for start := 0; start < len(todo); start += deleteBatch {
		dl.deleteLayerBatch(ctx, s, rep, todo[start:min(start+deleteBatch, len(todo))], deleted, removed)
	}
}

// deleteLayerBatch fences the layer links of batch, re-reads the revisions
// and deletes the links no manifest pushed since the plan references.
func (dl *deleter) deleteLayerBatch(ctx context.Context, s *gc.Snapshot, rep *Report, batch []digest.Digest, deleted, removed map[digest.Digest]bool) {
	held := map[digest.Digest]reclaim.Hold{}
	dl.fenceWindow(ctx)
	for _, l := range batch {
		h, r, detail := dl.fence(ctx, reclaim.Object{Blob: l, Repo: dl.pol.Repo, Kind: reclaim.LinkLayer})
		if r != reasonInvalid {
			rep.add(gc.Decision{Kind: reclaim.KindLayerLink, Digest: l, Reason: r, Detail: detail})
			continue
		}
		held[l] = h
	}
	if len(held) == 0 {
		return
	}
	since := dl.readSincePlan(ctx, s, deleted)
	gone := dl.deleteHeld(ctx, s, rep, reclaim.KindLayerLink, batch, held, since, func(l digest.Digest, h reclaim.Hold) gc.Decision {
		return dl.deleteDir(ctx, reclaim.KindLayerLink, l, dl.sizes[l], layout.LayerLinkDir(dl.pol.Repo, l), h)
	})
	for _, l := range gone {
		removed[l] = true
	}
}

// deleteHeld goes through batch in order and, for each object whose fence
// it holds, deletes it with del unless something pushed since the plan
// keeps it, releases the fence and reports the decision. It returns the
// objects it deleted.
func (dl *deleter) deleteHeld(ctx context.Context, s *gc.Snapshot, rep *Report, kind reclaim.ObjectKind, batch []digest.Digest,
	held map[digest.Digest]reclaim.Hold, since sincePlan, del func(digest.Digest, reclaim.Hold) gc.Decision) []digest.Digest {
	var gone []digest.Digest
	for _, d := range batch {
		h, ok := held[d]
		if !ok {
			continue
		}
		dec, kept := since.keeps(kind, d)
		switch {
		case !kept:
			dec = del(d, h)
		case kind == reclaim.KindManifest:
			dec.Size = s.Revisions[d].Size // a kept manifest still reports its size
		}
		dl.release(ctx, rep, kind, d, h)
		if dec.Deleted() {
			gone = append(gone, d)
		}
		rep.add(dec)
	}
	return gone
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
// that the delete phase did not delete: the manifest is then kept with it.
func survivingParent(parents []digest.Digest, deleted map[digest.Digest]bool) (digest.Digest, bool) {
	for _, p := range parents {
		if !deleted[p] {
			return p, true
		}
	}
	return "", false
}

func keptByParent(s *gc.Snapshot, m, parent digest.Digest) gc.Decision {
	dec := gc.Decision{Kind: reclaim.KindManifest, Digest: m, Reason: reclaim.ReasonIndexChild, Detail: "kept by " + parent.String(), Size: s.Revisions[m].Size}
	if parent == s.Revisions[m].Subject {
		dec.Reason = reclaim.ReasonReferrer
	}
	return dec
}
