package reclaim

import (
	"time"

	"github.com/opencontainers/go-digest"
)

// TrashEntry is one object a deleter removed while the trash was on
// (trash.keep > 0): what it was, why and by whom it was removed, and until
// when it can be put back. Its record is a hold on the blob that holds its
// bytes (a tag's and a manifest's: the manifest blob), stored next to the
// blob's reverse links (storage/layout.TrashHoldPath), so every check that
// asks whether anything links a blob keeps it (ReasonInTrash).
type TrashEntry struct {
	ID      string        `json:"id"`   // "<removed unix ms>-<random>": a blob's holds list in removal order
	Kind    ObjectKind    `json:"kind"` // KindTag, KindManifest, KindLayerLink or KindBlob
	Repo    string        `json:"repository,omitempty"`
	Tag     string        `json:"tag,omitempty"`
	Digest  digest.Digest `json:"digest"` // the blob the hold is on
	Size    int64         `json:"size,omitempty"`
	Reason  string        `json:"reason"`         // why it was removed: a Reason's name, or "retention"
	By      string        `json:"by"`             // "gc", "reclaimer" or "retention"
	Run     string        `json:"run,omitempty"`  // the GC run that removed it
	Plan    string        `json:"plan,omitempty"` // the retention plan applied
	Removed time.Time     `json:"removed"`
	Expires time.Time     `json:"expires"`
}
