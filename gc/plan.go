package gc

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/opencontainers/go-digest"
)

// Plan is what a preview found deletable. Applying it deletes only objects
// it lists that still qualify at delete time.
type Plan struct {
	ID         string          `json:"plan_id"`
	Repository string          `json:"repository"`
	CreatedAt  time.Time       `json:"created_at"`
	ExpiresAt  time.Time       `json:"expires_at"`
	Manifests  []digest.Digest `json:"manifests"`
	Layers     []digest.Digest `json:"layers"`
	Blobs      []digest.Digest `json:"blobs"`

	set map[key]bool
}

func (p *Plan) has(k ObjectKind, d digest.Digest) bool { return p.set[key{k, d}] }

func (p *Plan) index() {
	p.set = map[key]bool{}
	for _, d := range p.Manifests {
		p.set[key{KindManifest, d}] = true
	}
	for _, d := range p.Layers {
		p.set[key{KindLayerLink, d}] = true
	}
	for _, d := range p.Blobs {
		p.set[key{KindBlob, d}] = true
	}
}

type key struct {
	kind ObjectKind
	d    digest.Digest
}

// marking is the mark phase: the closure of kept manifests over index
// children and referrers.
type marking struct {
	s           *snapshot
	kept        map[digest.Digest]Decision
	referrersOf map[digest.Digest][]digest.Digest // subject -> referrers
	unknownKept bool
}

func newMarking(s *snapshot) *marking {
	m := &marking{s: s, kept: map[digest.Digest]Decision{}, referrersOf: map[digest.Digest][]digest.Digest{}}
	for _, d := range sortedDigests(s.revisions) {
		if sub := s.revisions[d].subject; sub != "" {
			m.referrersOf[sub] = append(m.referrersOf[sub], d)
		}
	}
	return m
}

// keep marks d kept for r and, transitively, everything d keeps: the
// children of an index and the referrers of any kept manifest.
func (m *marking) keep(d digest.Digest, r Reason, detail string) {
	if _, ok := m.kept[d]; ok {
		return
	}
	if _, ok := m.s.revisions[d]; !ok {
		return
	}
	m.kept[d] = Decision{Kind: KindManifest, Digest: d, Reason: r, Detail: detail}
	queue := []digest.Digest{d}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		info := m.s.revisions[cur]
		if !info.known {
			m.unknownKept = true
		}
		add := func(child digest.Digest, r Reason, why digest.Digest) {
			if _, ok := m.kept[child]; ok {
				return
			}
			if _, ok := m.s.revisions[child]; !ok {
				return
			}
			m.kept[child] = Decision{Kind: KindManifest, Digest: child, Reason: r, Detail: "kept by " + why.String()}
			queue = append(queue, child)
		}
		for _, c := range info.refs {
			add(c, IndexChild, cur)
		}
		for _, ref := range m.referrersOf[cur] {
			add(ref, Referrer, cur)
		}
	}
}

// referencedBy returns every digest the given manifests reference, their own
// digests included, and whether any of them has an unknown media type.
func referencedBy(s *snapshot, manifests map[digest.Digest]bool) (map[digest.Digest]bool, bool) {
	out := map[digest.Digest]bool{}
	unknown := false
	for d := range manifests {
		info := s.revisions[d]
		if info == nil {
			continue
		}
		out[d] = true
		if !info.known {
			unknown = true
		}
		for _, r := range info.refs {
			out[r] = true
		}
	}
	return out, unknown
}

// planned is the outcome of the plan phase.
type planned struct {
	s          *snapshot
	decisions  []Decision      // every object, in report order
	manifests  []digest.Digest // to delete, parents before children
	layers     []digest.Digest
	blobs      []digest.Digest
	linkdbOK   bool
	lastAccess map[key]time.Time
}

// run-scoped inputs of planning and sweeping.
type runState struct {
	c          *Collector
	repo       string
	now        time.Time
	window     time.Duration
	cap        int
	keepUntag  bool
	restrict   *Plan
	linkdbOK   bool
	linkdbNote string
}

func (rs *runState) recent(t time.Time) bool { return t.After(rs.now.Add(-rs.window)) }

// access returns the last access of o and whether it is within the window.
func (rs *runState) access(ctx context.Context, o Object) (time.Time, bool, error) {
	t, ok, err := rs.c.tracker.LastAccess(ctx, o)
	if err != nil || !ok {
		return time.Time{}, false, err
	}
	return t, rs.recent(t), nil
}

func ptime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// plan decides every object of the snapshot without changing anything.
func (rs *runState) plan(ctx context.Context, s *snapshot) (*planned, error) {
	p := &planned{s: s, lastAccess: map[key]time.Time{}, linkdbOK: rs.linkdbOK}
	mk := newMarking(s)

	// Roots: every tag, "sha256-<hex>" referrers fallback tags included.
	tagsOf := map[digest.Digest][]string{}
	for tag, d := range s.tags {
		tagsOf[d] = append(tagsOf[d], tag)
	}
	for _, d := range sortedDigests(tagsOf) {
		sort.Strings(tagsOf[d])
		mk.keep(d, Tagged, "tag "+tagsOf[d][0])
	}
	// A manifest GC cannot parse is never deleted.
	for _, d := range sortedDigests(s.revisions) {
		if !s.revisions[d].known {
			mk.keep(d, UnknownMediaType, s.revisions[d].mediaType)
		}
	}
	// Its references are unknown, so it could reference any other manifest
	// of the repository: keep them all (the lead's design kept only layer
	// links; an unknown index type could reference manifests too).
	if mk.unknownKept {
		for _, d := range sortedDigests(s.revisions) {
			mk.keep(d, UnknownManifestKept, "")
		}
	}

	for _, d := range sortedDigests(s.revisions) {
		if _, ok := mk.kept[d]; ok {
			continue
		}
		r, detail, t, err := rs.untaggedKeep(ctx, d)
		if err != nil {
			r, detail = CheckFailed, err.Error()
		}
		p.lastAccess[key{KindManifest, d}] = t
		if r != reasonInvalid {
			mk.keep(d, r, detail)
			if dec, ok := mk.kept[d]; ok && dec.Reason == r {
				dec.LastAccess = ptime(t)
				mk.kept[d] = dec
			}
		}
	}

	// Cap: the oldest candidates go first; the rest are kept as capped,
	// and so is everything they keep.
	cands := rs.candidates(s, mk)
	budget := rs.cap
	if budget > 0 && len(cands) > budget {
		byAge(cands, KindManifest, p.lastAccess)
		for _, d := range cands[budget:] {
			mk.keep(d, Capped, "")
		}
		cands = rs.candidates(s, mk)
	}
	p.manifests = parentsFirst(s, cands)
	for _, d := range sortedDigests(s.revisions) {
		if dec, ok := mk.kept[d]; ok {
			dec.Size = s.revisions[d].size
			p.decisions = append(p.decisions, dec)
		}
	}
	for _, d := range p.manifests {
		p.decisions = append(p.decisions, Decision{Kind: KindManifest, Digest: d, Reason: Unreferenced,
			Size: s.revisions[d].size, LastAccess: ptime(p.lastAccess[key{KindManifest, d}])})
	}

	// Layer links.
	keptSet := map[digest.Digest]bool{}
	for d := range mk.kept {
		keptSet[d] = true
	}
	refd, unknown := referencedBy(s, keptSet)
	var lcands []digest.Digest
	for _, d := range sortedDigests(s.layers) {
		dec := Decision{Kind: KindLayerLink, Digest: d}
		switch {
		case refd[d]:
			dec.Reason = Referenced
		case unknown:
			dec.Reason = UnknownManifestKept
		default:
			t, recent, err := rs.access(ctx, Object{Blob: d, Repo: rs.repo, Kind: LinkLayer})
			p.lastAccess[key{KindLayerLink, d}] = t
			dec.LastAccess = ptime(t)
			switch {
			case err != nil:
				dec.Reason, dec.Detail = CheckFailed, err.Error()
			case recent:
				dec.Reason = RecentlyAccessed
			case rs.restrict != nil && !rs.restrict.has(KindLayerLink, d):
				dec.Reason = NotInPlan
			default:
				lcands = append(lcands, d)
				continue
			}
		}
		p.decisions = append(p.decisions, dec)
	}
	if rs.cap > 0 {
		left := max(rs.cap-len(p.manifests), 0)
		if len(lcands) > left {
			byAge(lcands, KindLayerLink, p.lastAccess)
			for _, d := range lcands[left:] {
				p.decisions = append(p.decisions, Decision{Kind: KindLayerLink, Digest: d, Reason: Capped,
					LastAccess: ptime(p.lastAccess[key{KindLayerLink, d}])})
			}
			lcands = lcands[:left]
			sort.Slice(lcands, func(i, j int) bool { return lcands[i] < lcands[j] })
		}
	}
	p.layers = lcands
	for _, d := range lcands {
		p.decisions = append(p.decisions, Decision{Kind: KindLayerLink, Digest: d, Reason: Unreferenced,
			LastAccess: ptime(p.lastAccess[key{KindLayerLink, d}])})
	}

	// Blobs: those whose last link in any repository this plan removes.
	removing := map[LinkKind]map[digest.Digest]bool{LinkManifest: {}, LinkLayer: {}}
	for _, d := range p.manifests {
		removing[LinkManifest][d] = true
	}
	for _, d := range p.layers {
		removing[LinkLayer][d] = true
	}
	for _, d := range unionSorted(p.manifests, p.layers) {
		dec := rs.blobCheck(ctx, d, func(l RepoLink) bool { return l.Repo == rs.repo && removing[l.Kind][d] })
		if dec.Deleted() {
			p.blobs = append(p.blobs, d)
		}
		p.decisions = append(p.decisions, dec)
	}
	return p, nil
}

// untaggedKeep decides whether an unmarked manifest is kept anyway.
func (rs *runState) untaggedKeep(ctx context.Context, d digest.Digest) (Reason, string, time.Time, error) {
	if rs.keepUntag {
		return PolicyKeepUntagged, "", time.Time{}, nil
	}
	if rs.c.pinner != nil {
		pinned, err := rs.c.pinner.Pinned(ctx, rs.repo, d)
		if err != nil {
			return reasonInvalid, "", time.Time{}, fmt.Errorf("pin check: %w", err)
		}
		if pinned {
			return Pinned, "", time.Time{}, nil
		}
	}
	t, recent, err := rs.access(ctx, Object{Blob: d, Repo: rs.repo, Kind: LinkManifest})
	if err != nil {
		return reasonInvalid, "", t, fmt.Errorf("access record: %w", err)
	}
	if recent {
		return RecentlyAccessed, "", t, nil
	}
	if rs.restrict != nil && !rs.restrict.has(KindManifest, d) {
		return NotInPlan, "", t, nil
	}
	return reasonInvalid, "", t, nil
}

// blobCheck decides a blob from its reverse links (ignoring the ones this
// run removes), its access record and its size. It changes nothing.
func (rs *runState) blobCheck(ctx context.Context, d digest.Digest, removed func(RepoLink) bool) Decision {
	dec := Decision{Kind: KindBlob, Digest: d}
	if !rs.linkdbOK {
		dec.Reason, dec.Detail = LinkDBIncomplete, rs.linkdbNote
		return dec
	}
	links, err := rs.c.links.List(ctx, d)
	if err != nil {
		dec.Reason, dec.Detail = CheckFailed, fmt.Sprintf("reverse links: %v", err)
		return dec
	}
	if l, ok := malformed(links, removed); ok {
		dec.Reason, dec.Detail = CheckFailed, l
		return dec
	}
	for _, l := range links {
		if removed(l) {
			continue
		}
		if l.Repo == rs.repo {
			dec.Reason, dec.Detail = StillLinked, string(l.Kind)
		} else {
			dec.Reason, dec.Detail = LinkedElsewhere, l.Repo
			return dec
		}
	}
	if dec.Reason != reasonInvalid {
		return dec
	}
	t, recent, err := rs.access(ctx, Object{Blob: d})
	dec.LastAccess = ptime(t)
	switch {
	case err != nil:
		dec.Reason, dec.Detail = CheckFailed, fmt.Sprintf("access record: %v", err)
		return dec
	case recent:
		dec.Reason = RecentlyAccessed
		return dec
	case rs.restrict != nil && !rs.restrict.has(KindBlob, d):
		dec.Reason = NotInPlan
		return dec
	}
	fi, err := rs.c.driver.Stat(ctx, blobDataPath(d))
	switch {
	case isNotFound(err):
		// The data is gone already; the directory (and any stale reverse
		// link) is still worth removing.
	case err != nil:
		dec.Reason, dec.Detail = CheckFailed, fmt.Sprintf("stat: %v", err)
		return dec
	default:
		dec.Size = fi.Size()
	}
	dec.Reason = Unreferenced
	return dec
}

// malformed describes the first link not removed by this run whose path
// holds something that is not a link file. Such a link keeps the blob like
// any other (fail closed), but as check_failed, so that the run reports it.
func malformed(links []RepoLink, removed func(RepoLink) bool) (string, bool) {
	for _, l := range links {
		if l.Problem != "" && !removed(l) {
			return fmt.Sprintf("reverse link of %s %s: %s; kept as linked, see `registry linkdb verify`", l.Repo, l.Kind, l.Problem), true
		}
	}
	return "", false
}

func (rs *runState) candidates(s *snapshot, mk *marking) []digest.Digest {
	var out []digest.Digest
	for _, d := range sortedDigests(s.revisions) {
		if _, ok := mk.kept[d]; !ok {
			out = append(out, d)
		}
	}
	return out
}

// byAge sorts oldest access first; no record counts as oldest.
func byAge(ds []digest.Digest, k ObjectKind, last map[key]time.Time) {
	sort.SliceStable(ds, func(i, j int) bool {
		ti, tj := last[key{k, ds[i]}], last[key{k, ds[j]}]
		if !ti.Equal(tj) {
			return ti.Before(tj)
		}
		return ds[i] < ds[j]
	})
}

// keepers returns, for each manifest, the manifests whose survival keeps it:
// the indexes that list it and the subject it refers to. Only manifests of
// the snapshot count.
func keepers(s *snapshot) map[digest.Digest][]digest.Digest {
	out := map[digest.Digest][]digest.Digest{}
	for _, d := range sortedDigests(s.revisions) {
		for _, c := range uniq(s.revisions[d].refs) {
			if _, ok := s.revisions[c]; ok && c != d {
				out[c] = append(out[c], d)
			}
		}
		if sub := s.revisions[d].subject; sub != "" && sub != d {
			if _, ok := s.revisions[sub]; ok {
				out[d] = append(out[d], sub)
			}
		}
	}
	return out
}

// parentsFirst orders manifests so that an index comes before its children
// and a subject before its referrers: if the first survives the sweep
// (accessed at the last moment), the others are then still there to be kept.
func parentsFirst(s *snapshot, ds []digest.Digest) []digest.Digest {
	in := map[digest.Digest]bool{}
	for _, d := range ds {
		in[d] = true
	}
	keptBy := keepers(s)
	children := map[digest.Digest][]digest.Digest{}
	indeg := map[digest.Digest]int{}
	for _, d := range ds {
		for _, p := range keptBy[d] {
			if in[p] {
				children[p] = append(children[p], d)
				indeg[d]++
			}
		}
	}
	var out, ready []digest.Digest
	for _, d := range ds {
		if indeg[d] == 0 {
			ready = append(ready, d)
		}
	}
	for len(ready) > 0 {
		d := ready[0]
		ready = ready[1:]
		out = append(out, d)
		for _, c := range children[d] {
			if indeg[c]--; indeg[c] == 0 {
				ready = append(ready, c)
			}
		}
	}
	if len(out) != len(ds) {
		// Impossible with content addressing (a cycle needs a hash
		// collision); keep the rest last rather than lose them.
		seen := map[digest.Digest]bool{}
		for _, d := range out {
			seen[d] = true
		}
		for _, d := range ds {
			if !seen[d] {
				out = append(out, d)
			}
		}
	}
	return out
}

func uniq(ds []digest.Digest) []digest.Digest {
	seen := map[digest.Digest]bool{}
	var out []digest.Digest
	for _, d := range ds {
		if !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	return out
}

func unionSorted(a, b []digest.Digest) []digest.Digest {
	m := map[digest.Digest]bool{}
	for _, d := range a {
		m[d] = true
	}
	for _, d := range b {
		m[d] = true
	}
	return sortedDigests(m)
}
