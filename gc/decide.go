package gc

import (
	"fmt"
	"sort"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/reclaim"
)

// reasonInvalid is the zero reclaim.Reason: no reason (yet), so nothing
// keeps or deletes the object on that account.
const reasonInvalid reclaim.Reason = 0

// Decide is the whole judgement of a run, and does no I/O: mark from the
// roots, keep untagged manifests by policy, pin and access record, cap the
// deletions, then decide the layer links and the blobs whose last link the
// plan removes. The snapshot and the facts are the only inputs, so a dry run
// and a real run reading the same storage decide the same.
func Decide(s *Snapshot, f *Facts, pol Policy) *Outcome {
	p := &Outcome{}
	last := map[key]time.Time{} // access records, for the cap's order
	mk := markRoots(s)
	keepUntagged(mk, f, pol, last)
	decideManifests(s, p, mk, pol, last)
	decideLayers(s, p, mk, f, pol, last)
	decideBlobs(p, f, pol)
	return p
}

// keepUntagged keeps each manifest the roots do not keep, when the policy,
// a pin or a recent access asks for it, or when a check failed.
func keepUntagged(mk *marking, f *Facts, pol Policy, last map[key]time.Time) {
	for _, d := range sortedDigests(mk.s.Revisions) {
		if _, ok := mk.kept[d]; ok {
			continue
		}
		r, detail, t := untaggedReason(f, pol, d)
		last[key{reclaim.KindManifest, d}] = t
		if r == reasonInvalid {
			continue
		}
		mk.keep(d, r, detail)
		if dec := mk.kept[d]; dec.Reason == r {
			dec.LastAccess = ptime(t)
			mk.kept[d] = dec
		}
	}
}

// untaggedReason is why an unmarked manifest is kept anyway; reasonInvalid
// when nothing keeps it. t is its last access, when that was read.
func untaggedReason(f *Facts, pol Policy, d digest.Digest) (r reclaim.Reason, detail string, t time.Time) {
	if pol.KeepUntagged {
		return reclaim.ReasonPolicyKeepUntagged, "", time.Time{}
	}
	if pol.Pins {
		pinned, err := f.pinned(d)
		if err != nil {
			return reclaim.ReasonCheckFailed, "pin check: " + err.Error(), time.Time{}
		}
		if pinned {
			return reclaim.ReasonPinned, "", time.Time{}
		}
	}
	t, err := f.lastAccess(reclaim.Object{Blob: d, Repo: pol.Repo, Kind: reclaim.LinkManifest})
	switch {
	case err != nil:
		return reclaim.ReasonCheckFailed, "access record: " + err.Error(), time.Time{}
	case pol.Recent(t):
		return reclaim.ReasonRecentlyAccessed, "", t
	case !pol.InPlan(reclaim.KindManifest, d):
		return reclaim.ReasonNotInPlan, "", t
	}
	return reasonInvalid, "", t
}

// decideManifests applies the cap (the oldest candidates go first; the rest
// are kept as capped, and so is everything they keep) and records a
// decision for every manifest.
func decideManifests(s *Snapshot, p *Outcome, mk *marking, pol Policy, last map[key]time.Time) {
	cands := mk.unkept()
	if pol.Cap > 0 && len(cands) > pol.Cap {
		byAge(cands, reclaim.KindManifest, last)
		for _, d := range cands[pol.Cap:] {
			mk.keep(d, reclaim.ReasonCapped, "")
		}
		cands = mk.unkept()
	}
	p.Manifests = parentsFirst(s, cands)
	for _, d := range sortedDigests(s.Revisions) {
		if dec, ok := mk.kept[d]; ok {
			dec.Size = s.Revisions[d].Size
			p.Decisions = append(p.Decisions, dec)
		}
	}
	for _, d := range p.Manifests {
		p.Decisions = append(p.Decisions, Decision{Kind: reclaim.KindManifest, Digest: d, Reason: reclaim.ReasonUnreferenced,
			Size: s.Revisions[d].Size, LastAccess: ptime(last[key{reclaim.KindManifest, d}])})
	}
}

// decideLayers keeps the layer links a kept manifest references or that
// were accessed recently, and caps the rest with what the manifests left.
func decideLayers(s *Snapshot, p *Outcome, mk *marking, f *Facts, pol Policy, last map[key]time.Time) {
	refd, unknown := mk.referenced()
	var cands []digest.Digest
	for _, d := range sortedDigests(s.Layers) {
		dec := Decision{Kind: reclaim.KindLayerLink, Digest: d}
		switch {
		case refd[d]:
			dec.Reason = reclaim.ReasonReferenced
		case unknown:
			dec.Reason = reclaim.ReasonUnknownManifestKept
		default:
			t, err := f.lastAccess(reclaim.Object{Blob: d, Repo: pol.Repo, Kind: reclaim.LinkLayer})
			last[key{reclaim.KindLayerLink, d}] = t
			dec.LastAccess = ptime(t)
			switch {
			case err != nil:
				dec.Reason, dec.Detail = reclaim.ReasonCheckFailed, err.Error()
			case pol.Recent(t):
				dec.Reason = reclaim.ReasonRecentlyAccessed
			case !pol.InPlan(reclaim.KindLayerLink, d):
				dec.Reason = reclaim.ReasonNotInPlan
			default:
				cands = append(cands, d)
				continue
			}
		}
		p.Decisions = append(p.Decisions, dec)
	}
	if left := max(pol.Cap-len(p.Manifests), 0); pol.Cap > 0 && len(cands) > left {
		byAge(cands, reclaim.KindLayerLink, last)
		for _, d := range cands[left:] {
			p.Decisions = append(p.Decisions, Decision{Kind: reclaim.KindLayerLink, Digest: d, Reason: reclaim.ReasonCapped,
				LastAccess: ptime(last[key{reclaim.KindLayerLink, d}])})
		}
		cands = cands[:left]
		sort.Slice(cands, func(i, j int) bool { return cands[i] < cands[j] })
	}
	p.Layers = cands
	for _, d := range cands {
		p.Decisions = append(p.Decisions, Decision{Kind: reclaim.KindLayerLink, Digest: d, Reason: reclaim.ReasonUnreferenced,
			LastAccess: ptime(last[key{reclaim.KindLayerLink, d}])})
	}
}

// decideBlobs decides the blobs whose link in this repository the plan
// removes, ignoring those links.
func decideBlobs(p *Outcome, f *Facts, pol Policy) {
	removing := map[reclaim.LinkKind]map[digest.Digest]bool{reclaim.LinkManifest: setOf(p.Manifests), reclaim.LinkLayer: setOf(p.Layers)}
	for _, d := range unionSorted(p.Manifests, p.Layers) {
		dec := decideBlob(f, pol, d, func(l reclaim.RepoLink) bool { return l.Repo == pol.Repo && removing[l.Kind][d] })
		if dec.Deleted() && pol.Trash {
			// the run's own holds will keep it: gone from the view, its
			// bytes held until the entries expire
			dec.Reason, dec.Detail = reclaim.ReasonInTrash, "held by the trash entries of this run"
		}
		if dec.Deleted() {
			p.Blobs = append(p.Blobs, d)
		}
		p.Decisions = append(p.Decisions, dec)
	}
}

// decideBlob decides one blob from its reverse links (ignoring the ones
// removed reports), its access record and its size.
func decideBlob(f *Facts, pol Policy, d digest.Digest, removed func(reclaim.RepoLink) bool) Decision {
	dec := Decision{Kind: reclaim.KindBlob, Digest: d}
	if !pol.LinkDBComplete {
		dec.Reason, dec.Detail = reclaim.ReasonLinkDBIncomplete, pol.LinkDBNote
		return dec
	}
	links, err := f.reverseLinks(d)
	if err != nil {
		dec.Reason, dec.Detail = reclaim.ReasonCheckFailed, fmt.Sprintf("reverse links: %v", err)
		return dec
	}
	if r, detail := linkedReason(links, pol.Repo, removed); r != reasonInvalid {
		dec.Reason, dec.Detail = r, detail
		if r == reclaim.ReasonInTrash {
			dec.Size, _ = f.size(d) // the bytes the trash holds, read with the links
		}
		return dec
	}
	t, err := f.lastAccess(reclaim.Object{Blob: d})
	dec.LastAccess = ptime(t)
	switch {
	case err != nil:
		dec.Reason, dec.Detail = reclaim.ReasonCheckFailed, fmt.Sprintf("access record: %v", err)
		return dec
	case pol.Recent(t):
		dec.Reason = reclaim.ReasonRecentlyAccessed
		return dec
	case !pol.InPlan(reclaim.KindBlob, d):
		dec.Reason = reclaim.ReasonNotInPlan
		return dec
	}
	// Size 0 without an error: the data is gone already; the directory
	// (and any stale reverse link) is still worth removing.
	size, err := f.size(d)
	if err != nil {
		dec.Reason, dec.Detail = reclaim.ReasonCheckFailed, fmt.Sprintf("stat: %v", err)
		return dec
	}
	dec.Size = size
	dec.Reason = reclaim.ReasonUnreferenced
	return dec
}

// DecideBlob decides one blob outside a plan (the delete phase after a
// link was removed, the reclaimer's review): as Decide does, with every
// reverse link counted.
func DecideBlob(f *Facts, pol Policy, d digest.Digest) Decision {
	return decideBlob(f, pol, d, func(reclaim.RepoLink) bool { return false })
}

// LinksKeep is the re-check of a blob under its fence, right before its
// delete: any reverse link listed now keeps it (a mount or push that
// linked it before the fence shows up here). The zero Reason: none does.
func LinksKeep(links []reclaim.RepoLink, repo string) (reclaim.Reason, string) {
	if detail, ok := malformed(links, func(reclaim.RepoLink) bool { return false }); ok {
		return reclaim.ReasonCheckFailed, detail
	}
	return linkedReason(links, repo, func(reclaim.RepoLink) bool { return false })
}

// linkedReason is why the reverse links keep a blob: a malformed link
// (check_failed), another repository (linked_elsewhere), or a link of this
// repository the run keeps (still_linked). Links removed reports are
// ignored.
func linkedReason(links []reclaim.RepoLink, repo string, removed func(reclaim.RepoLink) bool) (reclaim.Reason, string) {
	if detail, ok := malformed(links, removed); ok {
		return reclaim.ReasonCheckFailed, detail
	}
	r, detail := reasonInvalid, ""
	for _, l := range links {
		switch {
		case removed(l):
		case l.Kind == reclaim.LinkTrash:
			if r == reasonInvalid {
				r, detail = reclaim.ReasonInTrash, "trash entry "+l.Hold
			}
		case l.Repo != repo:
			return reclaim.ReasonLinkedElsewhere, l.Repo
		default:
			r, detail = reclaim.ReasonStillLinked, string(l.Kind)
		}
	}
	return r, detail
}

// malformed describes the first link not removed by this run whose path
// holds something that is not a link file. Such a link keeps the blob like
// any other (fail closed), but as check_failed, so that the run reports it.
func malformed(links []reclaim.RepoLink, removed func(reclaim.RepoLink) bool) (string, bool) {
	for _, l := range links {
		if l.Problem != "" && !removed(l) {
			if l.Kind == reclaim.LinkTrash {
				return fmt.Sprintf("trash hold %s: %s; kept as held", l.Hold, l.Problem), true
			}
			return fmt.Sprintf("reverse link of %s %s: %s; kept as linked, see `registry linkdb verify`", l.Repo, l.Kind, l.Problem), true
		}
	}
	return "", false
}

// byAge sorts oldest access first; no record counts as oldest.
func byAge(ds []digest.Digest, k reclaim.ObjectKind, last map[key]time.Time) {
	sort.SliceStable(ds, func(i, j int) bool {
		ti, tj := last[key{k, ds[i]}], last[key{k, ds[j]}]
		if !ti.Equal(tj) {
			return ti.Before(tj)
		}
		return ds[i] < ds[j]
	})
}

func ptime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
