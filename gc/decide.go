package gc

import (
	"fmt"
	"sort"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// reasonInvalid is the zero reclaim.Reason: no reason (yet), so nothing
// keeps or deletes the object on that account.
const reasonInvalid reclaim.Reason = 0

// decide is the whole judgement of a run, and does no I/O: mark from the
// roots, keep untagged manifests by policy, pin and access record, cap the
// deletions, then decide the layer links and the blobs whose last link the
// plan removes. The snapshot and the facts are the only inputs, so a dry run
// and a real run reading the same storage decide the same.
func decide(s *snapshot, f *facts, pol policy) *planned {
	p := &planned{s: s}
	last := map[key]time.Time{} // access records, for the cap's order
	mk := markRoots(s)
	keepUntagged(mk, f, pol, last)
	decideManifests(p, mk, pol, last)
	decideLayers(p, mk, f, pol, last)
	decideBlobs(p, f, pol)
	return p
}

// keepUntagged keeps each manifest the roots do not keep, when the policy,
// a pin or a recent access asks for it, or when a check failed.
func keepUntagged(mk *marking, f *facts, pol policy, last map[key]time.Time) {
	for _, d := range sortedDigests(mk.s.revisions) {
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
func untaggedReason(f *facts, pol policy, d digest.Digest) (r reclaim.Reason, detail string, t time.Time) {
	if pol.keepUntag {
		return reclaim.ReasonPolicyKeepUntagged, "", time.Time{}
	}
	if pol.pins {
		pinned, err := f.pinned(d)
		if err != nil {
			return reclaim.ReasonCheckFailed, "pin check: " + err.Error(), time.Time{}
		}
		if pinned {
			return reclaim.ReasonPinned, "", time.Time{}
		}
	}
	t, err := f.lastAccess(reclaim.Object{Blob: d, Repo: pol.repo, Kind: reclaim.LinkManifest})
	switch {
	case err != nil:
		return reclaim.ReasonCheckFailed, "access record: " + err.Error(), time.Time{}
	case pol.recent(t):
		return reclaim.ReasonRecentlyAccessed, "", t
	case !pol.inPlan(reclaim.KindManifest, d):
		return reclaim.ReasonNotInPlan, "", t
	}
	return reasonInvalid, "", t
}

// decideManifests applies the cap (the oldest candidates go first; the rest
// are kept as capped, and so is everything they keep) and records a
// decision for every manifest.
func decideManifests(p *planned, mk *marking, pol policy, last map[key]time.Time) {
	s := p.s
	cands := mk.unkept()
	if pol.cap > 0 && len(cands) > pol.cap {
		byAge(cands, reclaim.KindManifest, last)
		for _, d := range cands[pol.cap:] {
			mk.keep(d, reclaim.ReasonCapped, "")
		}
		cands = mk.unkept()
	}
	p.manifests = parentsFirst(s, cands)
	for _, d := range sortedDigests(s.revisions) {
		if dec, ok := mk.kept[d]; ok {
			dec.Size = s.revisions[d].size
			p.decisions = append(p.decisions, dec)
		}
	}
	for _, d := range p.manifests {
		p.decisions = append(p.decisions, Decision{Kind: reclaim.KindManifest, Digest: d, Reason: reclaim.ReasonUnreferenced,
			Size: s.revisions[d].size, LastAccess: ptime(last[key{reclaim.KindManifest, d}])})
	}
}

// decideLayers keeps the layer links a kept manifest references or that
// were accessed recently, and caps the rest with what the manifests left.
func decideLayers(p *planned, mk *marking, f *facts, pol policy, last map[key]time.Time) {
	refd, unknown := mk.referenced()
	var cands []digest.Digest
	for _, d := range sortedDigests(p.s.layers) {
		dec := Decision{Kind: reclaim.KindLayerLink, Digest: d}
		switch {
		case refd[d]:
			dec.Reason = reclaim.ReasonReferenced
		case unknown:
			dec.Reason = reclaim.ReasonUnknownManifestKept
		default:
			t, err := f.lastAccess(reclaim.Object{Blob: d, Repo: pol.repo, Kind: reclaim.LinkLayer})
			last[key{reclaim.KindLayerLink, d}] = t
			dec.LastAccess = ptime(t)
			switch {
			case err != nil:
				dec.Reason, dec.Detail = reclaim.ReasonCheckFailed, err.Error()
			case pol.recent(t):
				dec.Reason = reclaim.ReasonRecentlyAccessed
			case !pol.inPlan(reclaim.KindLayerLink, d):
				dec.Reason = reclaim.ReasonNotInPlan
			default:
				cands = append(cands, d)
				continue
			}
		}
		p.decisions = append(p.decisions, dec)
	}
	if left := max(pol.cap-len(p.manifests), 0); pol.cap > 0 && len(cands) > left {
		byAge(cands, reclaim.KindLayerLink, last)
		for _, d := range cands[left:] {
			p.decisions = append(p.decisions, Decision{Kind: reclaim.KindLayerLink, Digest: d, Reason: reclaim.ReasonCapped,
				LastAccess: ptime(last[key{reclaim.KindLayerLink, d}])})
		}
		cands = cands[:left]
		sort.Slice(cands, func(i, j int) bool { return cands[i] < cands[j] })
	}
	p.layers = cands
	for _, d := range cands {
		p.decisions = append(p.decisions, Decision{Kind: reclaim.KindLayerLink, Digest: d, Reason: reclaim.ReasonUnreferenced,
			LastAccess: ptime(last[key{reclaim.KindLayerLink, d}])})
	}
}

// decideBlobs decides the blobs whose link in this repository the plan
// removes, ignoring those links.
func decideBlobs(p *planned, f *facts, pol policy) {
	removing := map[reclaim.LinkKind]map[digest.Digest]bool{reclaim.LinkManifest: setOf(p.manifests), reclaim.LinkLayer: setOf(p.layers)}
	for _, d := range unionSorted(p.manifests, p.layers) {
		dec := decideBlob(f, pol, d, func(l reclaim.RepoLink) bool { return l.Repo == pol.repo && removing[l.Kind][d] })
		if dec.Deleted() {
			p.blobs = append(p.blobs, d)
		}
		p.decisions = append(p.decisions, dec)
	}
}

// decideBlob decides one blob from its reverse links (ignoring the ones
// removed reports), its access record and its size.
func decideBlob(f *facts, pol policy, d digest.Digest, removed func(reclaim.RepoLink) bool) Decision {
	dec := Decision{Kind: reclaim.KindBlob, Digest: d}
	if !pol.linkdbOK {
		dec.Reason, dec.Detail = reclaim.ReasonLinkDBIncomplete, pol.linkdbNote
		return dec
	}
	links, err := f.reverseLinks(d)
	if err != nil {
		dec.Reason, dec.Detail = reclaim.ReasonCheckFailed, fmt.Sprintf("reverse links: %v", err)
		return dec
	}
	if r, detail := linkedReason(links, pol.repo, removed); r != reasonInvalid {
		dec.Reason, dec.Detail = r, detail
		return dec
	}
	t, err := f.lastAccess(reclaim.Object{Blob: d})
	dec.LastAccess = ptime(t)
	switch {
	case err != nil:
		dec.Reason, dec.Detail = reclaim.ReasonCheckFailed, fmt.Sprintf("access record: %v", err)
		return dec
	case pol.recent(t):
		dec.Reason = reclaim.ReasonRecentlyAccessed
		return dec
	case !pol.inPlan(reclaim.KindBlob, d):
		dec.Reason = reclaim.ReasonNotInPlan
		return dec
	}
	size, err := f.size(d)
	switch {
	case layout.IsNotFound(err):
		// The data is gone already; the directory (and any stale reverse
		// link) is still worth removing.
	case err != nil:
		dec.Reason, dec.Detail = reclaim.ReasonCheckFailed, fmt.Sprintf("stat: %v", err)
		return dec
	default:
		dec.Size = size
	}
	dec.Reason = reclaim.ReasonUnreferenced
	return dec
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
