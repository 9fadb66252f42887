package linkdb

import (
	"sync"

	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/internal/enum"
)

// Kind is what is wrong with one object. The same words are used by the
// human summary, the JSON report, the logs and the tests.
type Kind string

const (
	// MissingReverse: a forward link (repository -> blob) has no reverse
	// link. GC could delete a blob that repository still uses: data-loss
	// risk. Fixed by rebuild.
	MissingReverse Kind = "missing_reverse"
	// StaleReverse: a reverse link whose forward link does not exist. GC will
	// never delete the blob on its own: a leak. Fixed by rebuild.
	StaleReverse Kind = "stale_reverse"
	// Reclaimable: a blob no repository links. GC will delete it.
	Reclaimable Kind = "reclaimable"
	// BrokenForward: a forward link to a blob whose data is missing. The
	// data was lost before anyone looked: pulls of it already fail. It is
	// not a risk GC adds (the reverse link is all GC needs), so it does not
	// keep rebuild from marking the database complete, and no linkdb
	// command can repair it (Remedy).
	BrokenForward Kind = "broken_forward"
	// Corrupt: a link file whose content is not exactly the digest it should
	// hold (for a tag's current link: not a digest), a referrers entry that
	// is not a descriptor, something at a link path that is not a file (a
	// directory, an entry the listing shows but Stat cannot see, such as a
	// dangling symlink), or a manifest whose content does not match its
	// digest.
	Corrupt Kind = "corrupt"
	// StaleReferrer: a referrers index entry whose referrer manifest revision
	// is gone. The referrers API lists a manifest that does not exist.
	StaleReferrer Kind = "stale_referrer"
	// MissingReferrer: a manifest with a subject that the referrers index does
	// not list. Fixed by rebuild.
	MissingReferrer Kind = "missing_referrer"
	// DanglingTag: a tag directory that holds history entries but no
	// current link. Distribution's tag list names the tag while a pull of
	// it answers MANIFEST_UNKNOWN. A tag write or delete that failed
	// half-way leaves it (storage faults); it references nothing, so it is
	// not a GC risk, and no linkdb command removes it (Remedy).
	DanglingTag Kind = "dangling_tag"
	// Unreadable: a directory or file could not be read. What it holds is
	// unknown; in particular its blobs are never called reclaimable.
	Unreadable Kind = "unreadable"
)

var kinds = enum.Strings("linkdb.Kind", MissingReverse, MissingReferrer, Corrupt, BrokenForward, DanglingTag, Unreadable, StaleReverse, StaleReferrer, Reclaimable)

// Kinds lists every kind in report order.
var Kinds = kinds.Values()

func (k Kind) String() string { return kinds.String(k) }

// MarshalText encodes the name; a kind outside the set is an error.
func (k Kind) MarshalText() ([]byte, error) { return kinds.MarshalText(k) }

// UnmarshalText decodes a name, strictly.
func (k *Kind) UnmarshalText(b []byte) error { return kinds.UnmarshalText(b, k) }

// Message is the one-line explanation of k.
func (k Kind) Message() string {
	switch k {
	case MissingReverse:
		return "forward link without reverse link (data-loss risk: GC could delete a used blob)"
	case StaleReverse:
		return "reverse link without forward link (leak: blob kept longer than needed)"
	case Reclaimable:
		return "blob no repository links (GC will reclaim it)"
	case BrokenForward:
		return "forward link to a blob whose data is gone (already lost, not a GC risk)"
	case DanglingTag:
		return "tag directory without a current link (listed, not pullable; not a GC risk)"
	case Corrupt:
		return "link path that is not a file holding the digest it should, or a manifest not matching its digest"
	case StaleReferrer:
		return "referrers index entry whose referrer manifest is gone"
	case MissingReferrer:
		return "manifest with a subject missing from the referrers index"
	case Unreadable:
		return "could not be read (unknown, never treated as unreferenced)"
	}
	return string(k)
}

// Remedy says what fixes k where no linkdb command does: the one wording
// rebuild and verify both print ("" for the kinds a command repairs).
func (k Kind) Remedy() string {
	switch k {
	case BrokenForward:
		return "the data was lost before this check and no linkdb command brings it back: " +
			"push the image again, or delete the dangling link (a manifest revision: DELETE /v2/<repository>/manifests/<digest>; " +
			"GC aborts on its repository until then)"
	case Corrupt:
		return "no command repairs these; look at each path listed (docs/operations.md, the findings table), fix or delete it"
	case DanglingTag:
		return "delete each such tag through the registry: DELETE /v2/<repository>/manifests/<tag> removes its directory"
	}
	return ""
}

// Problem is one finding.
type Problem struct {
	Kind   Kind          `json:"kind"`
	Path   string        `json:"path"`
	Repo   string        `json:"repository,omitempty"`
	Digest digest.Digest `json:"digest,omitempty"`
	Size   int64         `json:"size,omitempty"`
	Detail string        `json:"detail,omitempty"`
}

// findings counts problems by kind and keeps the first few of each, so memory
// stays bounded however broken a registry is.
type findings struct {
	mu     sync.Mutex
	max    int
	counts map[Kind]int64
	bytes  map[Kind]int64
	items  map[Kind][]Problem
}

func newFindings(max int) *findings {
	return &findings{max: max, counts: map[Kind]int64{}, bytes: map[Kind]int64{}, items: map[Kind][]Problem{}}
}

func (f *findings) add(p Problem) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.counts[p.Kind]++
	f.bytes[p.Kind] += p.Size
	if len(f.items[p.Kind]) < f.max {
		f.items[p.Kind] = append(f.items[p.Kind], p)
	}
}

func (f *findings) count(k Kind) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.counts[k]
}

// size is the sum of the sizes of every problem of kind k.
func (f *findings) size(k Kind) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.bytes[k]
}

// report returns the exact count of every kind found and the problems kept,
// in report order.
func (f *findings) report() (counts map[Kind]int64, kept []Problem) {
	f.mu.Lock()
	defer f.mu.Unlock()
	counts = map[Kind]int64{}
	for _, k := range Kinds {
		if n := f.counts[k]; n > 0 {
			counts[k] = n
		}
		kept = append(kept, f.items[k]...)
	}
	return counts, kept
}
