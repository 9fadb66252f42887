package gc

import (
	"sort"

	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/reclaim"
)

// marking is the mark phase: the closure of kept manifests over index
// children and referrers.
type marking struct {
	s           *Snapshot
	kept        map[digest.Digest]Decision
	referrersOf map[digest.Digest][]digest.Digest // subject -> referrers
	unknownKept bool
}

func newMarking(s *Snapshot) *marking {
	m := &marking{s: s, kept: map[digest.Digest]Decision{}, referrersOf: map[digest.Digest][]digest.Digest{}}
	for _, d := range sortedDigests(s.Revisions) {
		if sub := s.Revisions[d].Subject; sub != "" {
			m.referrersOf[sub] = append(m.referrersOf[sub], d)
		}
	}
	return m
}

// markRoots keeps what no fact can change: every tag ("sha256-<hex>"
// referrers fallback tags included) and every manifest of an unknown media
// type, with everything they keep. An unknown manifest's references are
// unknown, so it could reference any other manifest of the repository:
// then all of them are kept.
func markRoots(s *Snapshot) *marking {
	mk := newMarking(s)
	tagsOf := map[digest.Digest][]string{}
	for tag, d := range s.Tags {
		tagsOf[d] = append(tagsOf[d], tag)
	}
	for _, d := range sortedDigests(tagsOf) {
		sort.Strings(tagsOf[d])
		mk.keep(d, reclaim.ReasonTagged, "tag "+tagsOf[d][0])
	}
	for _, d := range sortedDigests(s.Revisions) {
		if !s.Revisions[d].Known {
			mk.keep(d, reclaim.ReasonUnknownMediaType, s.Revisions[d].MediaType)
		}
	}
	if mk.unknownKept {
		for _, d := range sortedDigests(s.Revisions) {
			mk.keep(d, reclaim.ReasonUnknownManifestKept, "")
		}
	}
	return mk
}

// keep marks d kept for r and, transitively, everything d keeps: the
// children of an index and the referrers of any kept manifest.
func (m *marking) keep(d digest.Digest, r reclaim.Reason, detail string) {
	if !m.add(d, Decision{Kind: reclaim.KindManifest, Digest: d, Reason: r, Detail: detail}) {
		return
	}
	queue := []digest.Digest{d}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		info := m.s.Revisions[cur]
		if !info.Known {
			m.unknownKept = true
		}
		keptBy := Decision{Kind: reclaim.KindManifest, Detail: "kept by " + cur.String()}
		for _, c := range info.Refs {
			if keptBy.Digest, keptBy.Reason = c, reclaim.ReasonIndexChild; m.add(c, keptBy) {
				queue = append(queue, c)
			}
		}
		for _, ref := range m.referrersOf[cur] {
			if keptBy.Digest, keptBy.Reason = ref, reclaim.ReasonReferrer; m.add(ref, keptBy) {
				queue = append(queue, ref)
			}
		}
	}
}

// add records dec for a manifest of the snapshot not kept yet.
func (m *marking) add(d digest.Digest, dec Decision) bool {
	if _, ok := m.kept[d]; ok {
		return false
	}
	if _, ok := m.s.Revisions[d]; !ok {
		return false
	}
	m.kept[d] = dec
	return true
}

// unkept lists the manifests not kept, sorted.
func (m *marking) unkept() []digest.Digest {
	var out []digest.Digest
	for _, d := range sortedDigests(m.s.Revisions) {
		if _, ok := m.kept[d]; !ok {
			out = append(out, d)
		}
	}
	return out
}

// referenced returns every digest the kept manifests reference, their own
// digests included, and whether any of them has an unknown media type.
func (m *marking) referenced() (map[digest.Digest]bool, bool) {
	keptSet := map[digest.Digest]bool{}
	for d := range m.kept {
		keptSet[d] = true
	}
	return m.s.ReferencedBy(keptSet)
}

// ReferencedBy returns every digest the given manifests reference, their own
// digests included, and whether any of them has an unknown media type.
func (s *Snapshot) ReferencedBy(manifests map[digest.Digest]bool) (map[digest.Digest]bool, bool) {
	out := map[digest.Digest]bool{}
	unknown := false
	for d := range manifests {
		info := s.Revisions[d]
		if info == nil {
			continue
		}
		out[d] = true
		if !info.Known {
			unknown = true
		}
		for _, r := range info.Refs {
			out[r] = true
		}
	}
	return out, unknown
}

// Parents returns, for each manifest, the manifests whose survival keeps it:
// the indexes that list it and the subject it refers to. Only manifests of
// the snapshot count.
func (s *Snapshot) Parents() map[digest.Digest][]digest.Digest {
	out := map[digest.Digest][]digest.Digest{}
	for _, d := range sortedDigests(s.Revisions) {
		for _, c := range uniq(s.Revisions[d].Refs) {
			if _, ok := s.Revisions[c]; ok && c != d {
				out[c] = append(out[c], d)
			}
		}
		if sub := s.Revisions[d].Subject; sub != "" && sub != d {
			if _, ok := s.Revisions[sub]; ok {
				out[d] = append(out[d], sub)
			}
		}
	}
	return out
}

// parentsFirst orders manifests so that an index comes before its children
// and a subject before its referrers: if the first survives the delete phase
// (accessed at the last moment), the others are then still there to be kept.
func parentsFirst(s *Snapshot, ds []digest.Digest) []digest.Digest {
	in := setOf(ds)
	keptBy := s.Parents()
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
		seen := setOf(out)
		for _, d := range ds {
			if !seen[d] {
				out = append(out, d)
			}
		}
	}
	return out
}

func setOf(ds ...[]digest.Digest) map[digest.Digest]bool {
	m := map[digest.Digest]bool{}
	for _, l := range ds {
		for _, d := range l {
			m[d] = true
		}
	}
	return m
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

func unionSorted(a, b []digest.Digest) []digest.Digest { return sortedDigests(setOf(a, b)) }

func sortedDigests[V any](m map[digest.Digest]V) []digest.Digest {
	out := make([]digest.Digest, 0, len(m))
	for d := range m {
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
