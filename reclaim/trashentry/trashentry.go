// Package trashentry holds the words of recoverable deletion that every
// side speaks: an entry of the trash (what was removed, why, by whom, until
// when it can be put back) and what a restore did with one. The trash
// (package trash) writes and restores entries; the GC API, the console,
// the CLI and the deletion events read them.
package trashentry

import (
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/internal/enum"
	"github.com/reclaim-registry/reclaim/reclaim"
)

// Entry is one object a deleter removed while the trash was on
// (trash.keep > 0): what it was, why and by whom it was removed, and until
// when it can be put back. Its record is a hold on the blob that holds its
// bytes (a tag's and a manifest's: the manifest blob), stored next to the
// blob's reverse links (storage/layout.TrashHoldPath), so every check that
// asks whether anything links a blob keeps it (reclaim.ReasonInTrash).
type Entry struct {
	ID      string             `json:"id"`   // "<removed unix ms>-<random>": a blob's holds list in removal order
	Kind    reclaim.ObjectKind `json:"kind"` // KindTag, KindManifest, KindLayerLink or KindBlob
	Repo    string             `json:"repository,omitempty"`
	Tag     string             `json:"tag,omitempty"`
	Digest  digest.Digest      `json:"digest"` // the blob the hold is on
	Size    int64              `json:"size,omitempty"`
	Reason  string             `json:"reason"`         // why it was removed: a Reason's name, or "retention"
	By      string             `json:"by"`             // "gc", "reclaimer" or "retention"
	Run     string             `json:"run,omitempty"`  // the GC run that removed it
	Plan    string             `json:"plan,omitempty"` // the retention plan applied
	Removed time.Time          `json:"removed"`
	Expires time.Time          `json:"expires"`
}

// Outcome is what a restore did with one trash entry: the
// "outcome" of the API's restore report, what the CLI and the console
// print. A closed set, like reclaim.Reason.
type Outcome string

// What a restore did with one entry.
const (
	Restored     Outcome = "restored"      // put back; its hold is dropped
	AlreadyThere Outcome = "already_there" // the object was back already (pushed again); its hold is dropped
	TagMoved     Outcome = "tag_moved"     // the tag points elsewhere now: left alone, the entry stays
	Purged       Outcome = "purged"        // its data is gone: nothing to put back
	NotLinkable  Outcome = "not_linkable"  // a blob no repository linked: nothing to put back, the entry stays until it expires
	Failed       Outcome = "failed"        // a write or read failed; the entry stays, a retry may finish it
)

var outcomes = enum.Strings("trashentry.Outcome",
	Restored, AlreadyThere, TagMoved, Purged, NotLinkable, Failed)

// Outcomes lists every outcome in table order.
func Outcomes() []Outcome { return outcomes.Values() }

// Back reports whether the entry's object is back (restored or already there).
func (o Outcome) Back() bool { return o == Restored || o == AlreadyThere }

func (o Outcome) String() string { return outcomes.String(o) }

// MarshalText encodes the name; an outcome outside the set is an error.
func (o Outcome) MarshalText() ([]byte, error) { return outcomes.MarshalText(o) }

// UnmarshalText decodes a name, strictly.
func (o *Outcome) UnmarshalText(b []byte) error { return outcomes.UnmarshalText(b, o) }
