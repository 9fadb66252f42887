package reclaim

import "github.com/reclaim-registry/reclaim/internal/enum"

// Reason is why the collector kept or deleted one object. It is a closed set:
// the JSON report, the logs, the metrics and the tests all use the machine
// names below, so renaming one is an API change.
type Reason int

// Reasons to keep an object. The zero Reason is none: it is not valid and
// does not marshal.
const (
	reasonInvalid Reason = iota

	// ReasonTagged: a tag's current link points at the manifest.
	ReasonTagged
	// ReasonIndexChild: a kept index (or manifest list) references the manifest.
	ReasonIndexChild
	// ReasonReferrer: the manifest's subject is a kept manifest.
	ReasonReferrer
	// ReasonReferenced: a kept manifest references the layer link's blob.
	ReasonReferenced
	// ReasonRecentlyAccessed: read, statted, linked or pushed within the window.
	ReasonRecentlyAccessed
	// ReasonPolicyKeepUntagged: the untagged policy is "keep".
	ReasonPolicyKeepUntagged
	// ReasonPinned: a pin (for example a deploy record) asks to keep it.
	ReasonPinned
	// ReasonUnknownMediaType: the manifest has a media type GC cannot parse.
	ReasonUnknownMediaType
	// ReasonUnknownManifestKept: a kept manifest has an unknown media type, so
	// its references are unknown and nothing it might reference is removed.
	ReasonUnknownManifestKept
	// ReasonLinkedElsewhere: another repository links the blob.
	ReasonLinkedElsewhere
	// ReasonStillLinked: this repository still links the blob through a link the
	// run keeps (a manifest digest also present as a layer link, say).
	ReasonStillLinked
	// ReasonFenced: another collector holds a fence on the object.
	ReasonFenced
	// ReasonLinkDBIncomplete: the reverse-link database is not known to be
	// complete, so no blob may be deleted.
	ReasonLinkDBIncomplete
	// ReasonCapped: the run reached its deletion cap.
	ReasonCapped
	// ReasonNotInPlan: applying a plan, and the plan did not list the object.
	ReasonNotInPlan
	// ReasonFenceLost: the fence expired or was taken away before the delete it
	// guards, or while it ran (a stalled renewal, a paused process, Redis
	// losing the key); a writer may have passed, so kept (a delete cut
	// short may have removed part of it, see docs/gc-protocol.md).
	ReasonFenceLost
	// ReasonDeleteTimeout: the delete did not finish within its deadline (lease/2
	// after the fence was last confirmed, or 5 leases in all) and was
	// abandoned, so it never ran past the fence; kept.
	ReasonDeleteTimeout
	// ReasonCheckFailed: a read needed to decide failed (Redis, storage); kept,
	// because a failed check never means "deletable".
	ReasonCheckFailed
	// ReasonDeleteFailed: the delete itself failed; kept and reported.
	ReasonDeleteFailed
	// ReasonInTrash: no repository links the blob, and a trash entry holds
	// its data until the entry expires or is restored (trash.keep > 0):
	// gone from the registry's view, its bytes not freed yet.
	ReasonInTrash

	// Reasons for a deletion.

	// ReasonUnreferenced: nothing keeps the object; deleted (or, in a dry run,
	// would be).
	ReasonUnreferenced
	// ReasonAlreadyGone: the object disappeared before the delete; counts as done.
	ReasonAlreadyGone

	reasonCount
)

var reasonText = [reasonCount]struct{ name, msg string }{
	reasonInvalid:             {"invalid", "invalid reason"},
	ReasonTagged:              {"tagged", "a tag points at this manifest"},
	ReasonIndexChild:          {"index_child", "a kept index references this manifest"},
	ReasonReferrer:            {"referrer", "the subject of this manifest is kept"},
	ReasonReferenced:          {"referenced", "a kept manifest references this blob"},
	ReasonRecentlyAccessed:    {"recently_accessed", "accessed or linked within the protection window"},
	ReasonPolicyKeepUntagged:  {"policy_keep_untagged", "the untagged policy is keep"},
	ReasonPinned:              {"pinned", "pinned"},
	ReasonUnknownMediaType:    {"unknown_media_type", "the manifest media type is unknown to the collector"},
	ReasonUnknownManifestKept: {"unknown_manifest_kept", "a kept manifest has an unknown media type, its references are unknown"},
	ReasonLinkedElsewhere:     {"linked_elsewhere", "another repository links this blob"},
	ReasonStillLinked:         {"still_linked", "this repository still links this blob"},
	ReasonFenced:              {"fenced", "another collector holds a fence on this object"},
	ReasonLinkDBIncomplete:    {"linkdb_incomplete", "the reverse-link database is not known to be complete; no blob is deleted"},
	ReasonCapped:              {"capped", "the run reached its deletion cap"},
	ReasonNotInPlan:           {"not_in_plan", "the applied plan did not list this object"},
	ReasonFenceLost:           {"fence_lost", "the fence expired or was lost before or during the delete; kept"},
	ReasonDeleteTimeout:       {"delete_timeout", "the delete did not finish within its deadline under the fence; kept"},
	ReasonCheckFailed:         {"check_failed", "a read needed to decide failed; kept"},
	ReasonDeleteFailed:        {"delete_failed", "the delete failed; kept"},
	ReasonInTrash:             {"in_trash", "no repository links this blob; the trash holds its data until the entry expires"},
	ReasonUnreferenced:        {"unreferenced", "nothing references this object"},
	ReasonAlreadyGone:         {"already_gone", "already deleted"},
}

// reasons is the table of names: reasonText's, in order.
var reasons = func() *enum.Set[Reason] {
	pairs := make([]enum.Pair[Reason], 0, reasonCount-1)
	for r := reasonInvalid + 1; r < reasonCount; r++ {
		pairs = append(pairs, enum.Pair[Reason]{Value: r, Name: reasonText[r].name})
	}
	return enum.New("reclaim.Reason", pairs...)
}()

// Reasons lists every valid reason, for documentation and metrics.
func Reasons() []Reason { return reasons.Values() }

// Valid reports whether r is one of the reasons above (the zero Reason is not).
func (r Reason) Valid() bool { return reasons.Valid(r) }

// String is the stable machine name, e.g. "recently_accessed".
func (r Reason) String() string { return reasons.String(r) }

// Message is a human sentence for reports and logs.
func (r Reason) Message() string {
	if !r.Valid() {
		return "invalid reason"
	}
	return reasonText[r].msg
}

// Deletes reports whether the reason describes a deletion.
func (r Reason) Deletes() bool { return r == ReasonUnreferenced || r == ReasonAlreadyGone }

// MarshalText encodes the machine name; an invalid reason is an error.
func (r Reason) MarshalText() ([]byte, error) { return reasons.MarshalText(r) }

// UnmarshalText decodes a machine name, strictly.
func (r *Reason) UnmarshalText(b []byte) error { return reasons.UnmarshalText(b, r) }
