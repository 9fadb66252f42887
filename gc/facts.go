package gc

import (
	"errors"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/reclaim"
)

// Facts is what a run reads besides the snapshot before it decides: pins,
// access records, reverse links and blob sizes. A failed read is a fact
// too (its Err), and Decide keeps the object it is about. The collector
// gathers what Wanted lists.
type Facts struct {
	Pins   map[digest.Digest]Fact[bool]
	Access map[reclaim.Object]Fact[time.Time] // zero time: no record
	Links  map[digest.Digest]Fact[[]reclaim.RepoLink]
	// Sizes of the blobs' data; 0 with no Err when the data is gone
	// already (the directory, and any stale reverse link, is still worth
	// removing).
	Sizes map[digest.Digest]Fact[int64]
}

// Fact is one read: its value, or the error that kept it from being read.
type Fact[T any] struct {
	V   T
	Err error
}

// NewFacts returns empty facts.
func NewFacts() *Facts {
	return &Facts{Pins: map[digest.Digest]Fact[bool]{}, Access: map[reclaim.Object]Fact[time.Time]{},
		Links: map[digest.Digest]Fact[[]reclaim.RepoLink]{}, Sizes: map[digest.Digest]Fact[int64]{}}
}

// ErrNoFact: Decide needed a fact nobody read. It keeps the object, like
// any failed read; gathering what Wanted lists makes it impossible.
var ErrNoFact = errors.New("fact not gathered")

func lookup[K comparable, T any](m map[K]Fact[T], k K) (T, error) {
	r, ok := m[k]
	if !ok {
		var zero T
		return zero, ErrNoFact
	}
	return r.V, r.Err
}

func (f *Facts) pinned(d digest.Digest) (bool, error)                     { return lookup(f.Pins, d) }
func (f *Facts) lastAccess(o reclaim.Object) (time.Time, error)           { return lookup(f.Access, o) }
func (f *Facts) reverseLinks(d digest.Digest) ([]reclaim.RepoLink, error) { return lookup(f.Links, d) }
func (f *Facts) size(d digest.Digest) (int64, error)                      { return lookup(f.Sizes, d) }

// Wanted lists the objects whose facts Decide may read, from the snapshot
// and the policy alone: every manifest the roots do not keep (pins and
// access), every layer link they do not reference (access), and the blobs
// of both (reverse links, access, size). That is more than Decide reads
// when an untagged manifest turns out kept, never less.
func Wanted(s *Snapshot, pol Policy) (manifests, layers, blobs []digest.Digest) {
	roots := markRoots(s)
	if !pol.KeepUntagged {
		manifests = roots.unkept()
	}
	if refd, unknown := roots.referenced(); !unknown {
		for _, d := range sortedDigests(s.Layers) {
			if !refd[d] {
				layers = append(layers, d)
			}
		}
	}
	if pol.LinkDBComplete {
		blobs = unionSorted(manifests, layers)
	}
	return manifests, layers, blobs
}
