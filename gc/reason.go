package gc

import "fmt"

// Reason is why the collector kept or deleted one object. It is a closed set:
// the JSON report, the logs, the metrics and the tests all use the machine
// names below, so renaming one is an API change.
type Reason int

// Reasons to keep an object.
const (
	reasonInvalid Reason = iota

	// Tagged: a tag's current link points at the manifest.
	Tagged
	// IndexChild: a kept index (or manifest list) references the manifest.
	IndexChild
	// Referrer: the manifest's subject is a kept manifest.
	Referrer
	// Referenced: a kept manifest references the layer link's blob.
	Referenced
	// RecentlyAccessed: read, statted, linked or pushed within the window.
	RecentlyAccessed
	// PolicyKeepUntagged: the untagged policy is "keep".
	PolicyKeepUntagged
	// Pinned: a pin (for example a deploy record) asks to keep it.
	Pinned
	// UnknownMediaType: the manifest has a media type GC cannot parse.
	UnknownMediaType
	// UnknownManifestKept: a kept manifest has an unknown media type, so
	// its references are unknown and nothing it might reference is removed.
	UnknownManifestKept
	// LinkedElsewhere: another repository links the blob.
	LinkedElsewhere
	// StillLinked: this repository still links the blob through a link the
	// run keeps (a manifest digest also present as a layer link, say).
	StillLinked
	// Fenced: another collector holds a fence on the object.
	Fenced
	// LinkDBIncomplete: the reverse-link database is not known to be
	// complete, so no blob may be deleted.
	LinkDBIncomplete
	// Capped: the run reached its deletion cap.
	Capped
	// NotInPlan: applying a plan, and the plan did not list the object.
	NotInPlan
	// FenceLost: the fence expired or was taken away before the delete it
	// guards, or while it ran (a stalled renewal, a paused process, Redis
	// losing the key); a writer may have passed, so kept (a delete cut
	// short may have removed part of it, see docs/gc-protocol.md).
	FenceLost
	// DeleteTimeout: the delete did not finish within its deadline (lease/2
	// after the fence was last confirmed, or 5 leases in all) and was
	// abandoned, so it never ran past the fence; kept.
	DeleteTimeout
	// CheckFailed: a read needed to decide failed (Redis, storage); kept,
	// because a failed check never means "deletable".
	CheckFailed
	// DeleteFailed: the delete itself failed; kept and reported.
	DeleteFailed

	// Reasons for a deletion.

	// Unreferenced: nothing keeps the object; deleted (or, in a dry run,
	// would be).
	Unreferenced
	// AlreadyGone: the object disappeared before the delete; counts as done.
	AlreadyGone

	reasonCount
)

var reasonText = [reasonCount]struct{ name, msg string }{
	reasonInvalid:       {"invalid", "invalid reason"},
	Tagged:              {"tagged", "a tag points at this manifest"},
	IndexChild:          {"index_child", "a kept index references this manifest"},
	Referrer:            {"referrer", "the subject of this manifest is kept"},
	Referenced:          {"referenced", "a kept manifest references this blob"},
	RecentlyAccessed:    {"recently_accessed", "accessed or linked within the protection window"},
	PolicyKeepUntagged:  {"policy_keep_untagged", "the untagged policy is keep"},
	Pinned:              {"pinned", "pinned"},
	UnknownMediaType:    {"unknown_media_type", "the manifest media type is unknown to the collector"},
	UnknownManifestKept: {"unknown_manifest_kept", "a kept manifest has an unknown media type, its references are unknown"},
	LinkedElsewhere:     {"linked_elsewhere", "another repository links this blob"},
	StillLinked:         {"still_linked", "this repository still links this blob"},
	Fenced:              {"fenced", "another collector holds a fence on this object"},
	LinkDBIncomplete:    {"linkdb_incomplete", "the reverse-link database is not known to be complete; no blob is deleted"},
	Capped:              {"capped", "the run reached its deletion cap"},
	NotInPlan:           {"not_in_plan", "the applied plan did not list this object"},
	FenceLost:           {"fence_lost", "the fence expired or was lost before or during the delete; kept"},
	DeleteTimeout:       {"delete_timeout", "the delete did not finish within its deadline under the fence; kept"},
	CheckFailed:         {"check_failed", "a read needed to decide failed; kept"},
	DeleteFailed:        {"delete_failed", "the delete failed; kept"},
	Unreferenced:        {"unreferenced", "nothing references this object"},
	AlreadyGone:         {"already_gone", "already deleted"},
}

// Reasons lists every valid reason, for documentation and metrics.
func Reasons() []Reason {
	rs := make([]Reason, 0, reasonCount-1)
	for r := reasonInvalid + 1; r < reasonCount; r++ {
		rs = append(rs, r)
	}
	return rs
}

func (r Reason) valid() bool { return r > reasonInvalid && r < reasonCount }

// String is the stable machine name, e.g. "recently_accessed".
func (r Reason) String() string {
	if !r.valid() {
		return fmt.Sprintf("reason(%d)", int(r))
	}
	return reasonText[r].name
}

// Message is a human sentence for reports and logs.
func (r Reason) Message() string {
	if !r.valid() {
		return "invalid reason"
	}
	return reasonText[r].msg
}

// Deletes reports whether the reason describes a deletion.
func (r Reason) Deletes() bool { return r == Unreferenced || r == AlreadyGone }

// MarshalText encodes the machine name.
func (r Reason) MarshalText() ([]byte, error) {
	if !r.valid() {
		return nil, fmt.Errorf("gc: invalid reason %d", int(r))
	}
	return []byte(r.String()), nil
}

// UnmarshalText decodes a machine name.
func (r *Reason) UnmarshalText(b []byte) error {
	for i := reasonInvalid + 1; i < reasonCount; i++ {
		if reasonText[i].name == string(b) {
			*r = i
			return nil
		}
	}
	return fmt.Errorf("gc: unknown reason %q", b)
}

// AbortReason is why a run stopped before deleting anything.
type AbortReason string

// The preconditions a run checks before it deletes anything.
const (
	AbortRedisUnavailable       AbortReason = "redis_unavailable"
	AbortRedisUntrusted         AbortReason = "redis_untrusted"
	AbortRedisRecordingTooShort AbortReason = "redis_recording_too_short"
	AbortRedisEvicts            AbortReason = "redis_evicts"
	AbortManifestUnreadable     AbortReason = "manifest_unreadable"
	AbortStorageUnreadable      AbortReason = "storage_unreadable"
)

// ObjectKind is what kind of object a decision is about.
type ObjectKind string

// The three kinds of object a run looks at.
const (
	KindManifest  ObjectKind = "manifest"   // a manifest revision link of the repository
	KindLayerLink ObjectKind = "layer_link" // a layer link of the repository
	KindBlob      ObjectKind = "blob"       // a blob in the global store
	KindRun       ObjectKind = "run"        // the run itself (errors only)
)
