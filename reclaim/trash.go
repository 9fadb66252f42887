package reclaim

import (
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/internal/enum"
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

// RestoreOutcome is what a restore did with one trash entry: the
// "outcome" of the API's restore report, what the CLI and the console
// print. A closed set, like Reason.
type RestoreOutcome string

// What a restore did with one entry.
const (
	OutcomeRestored     RestoreOutcome = "restored"      // put back; its hold is dropped
	OutcomeAlreadyThere RestoreOutcome = "already_there" // the object was back already (pushed again); its hold is dropped
	OutcomeTagMoved     RestoreOutcome = "tag_moved"     // the tag points elsewhere now: left alone, the entry stays
	OutcomePurged       RestoreOutcome = "purged"        // its data is gone: nothing to put back
	OutcomeNotLinkable  RestoreOutcome = "not_linkable"  // a blob no repository linked: nothing to put back, the entry stays until it expires
	OutcomeFailed       RestoreOutcome = "failed"        // a write or read failed; the entry stays, a retry may finish it
)

var restoreOutcomes = enum.Strings("reclaim.RestoreOutcome",
	OutcomeRestored, OutcomeAlreadyThere, OutcomeTagMoved, OutcomePurged, OutcomeNotLinkable, OutcomeFailed)

// RestoreOutcomes lists every outcome in table order.
func RestoreOutcomes() []RestoreOutcome { return restoreOutcomes.Values() }

// Back reports whether the entry's object is back (restored or already there).
func (o RestoreOutcome) Back() bool { return o == OutcomeRestored || o == OutcomeAlreadyThere }

func (o RestoreOutcome) String() string { return restoreOutcomes.String(o) }

// MarshalText encodes the name; an outcome outside the set is an error.
func (o RestoreOutcome) MarshalText() ([]byte, error) { return restoreOutcomes.MarshalText(o) }

// UnmarshalText decodes a name, strictly.
func (o *RestoreOutcome) UnmarshalText(b []byte) error { return restoreOutcomes.UnmarshalText(b, o) }
