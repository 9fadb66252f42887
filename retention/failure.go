package retention

import (
	"errors"
	"fmt"

	"github.com/reclaim-registry/reclaim/internal/enum"
	"github.com/reclaim-registry/reclaim/reclaim"
)

// The failure model is asymmetric: what could make a run delete a version
// that runs aborts it (an AbortError, whose reason is one of reclaim's
// AbortInUseEmpty, AbortInUseStale, AbortInUseUnreadable,
// AbortInUseVersionUnreadable); what only makes it delete less skips a
// repository.

// SkipReason is why one repository is left out of a run (Skip): a closed
// set, like reclaim's reasons (its names are the API and the metrics'
// labels).
type SkipReason string

// Why one repository is left out of a run.
const (
	// SkipSourceUnreadable: a source the policy relies on cannot be read.
	SkipSourceUnreadable SkipReason = "source_unreadable"
	// SkipSourceEmpty: a source the policy relies on declares nothing (or
	// is missing).
	SkipSourceEmpty SkipReason = "source_empty"
	// SkipTagsUnreadable: the repository's tag list cannot be read.
	SkipTagsUnreadable SkipReason = "tags_unreadable"
	// SkipPullsUnreadable: the policy keeps versions pulled lately
	// (pulled_within) and the repository's pull record cannot be read.
	SkipPullsUnreadable SkipReason = "pulls_unreadable"
)

var skipReasons = enum.Strings("retention.SkipReason", SkipSourceUnreadable, SkipSourceEmpty, SkipTagsUnreadable, SkipPullsUnreadable)

func (r SkipReason) String() string { return skipReasons.String(r) }

// MarshalText encodes the name; a reason outside the set is an error.
func (r SkipReason) MarshalText() ([]byte, error) { return skipReasons.MarshalText(r) }

// UnmarshalText decodes a name, strictly.
func (r *SkipReason) UnmarshalText(b []byte) error { return skipReasons.UnmarshalText(b, r) }

// LeftReason is why apply left a planned tag: a closed set, like
// SkipReason (its names are the API's "reason" of a skipped tag and the
// labels of reclaim_retention_apply_skipped_total).
type LeftReason string

// Why apply left a planned tag.
const (
	ChangedInUse    LeftReason = "in_use"    // became in use since the plan
	ChangedPinned   LeftReason = "pinned"    // pinned since the plan
	ChangedTagMoved LeftReason = "tag_moved" // the tag points at another manifest now
	ChangedTagGone  LeftReason = "tag_gone"  // the tag was deleted meanwhile
	ChangedPulled   LeftReason = "pulled"    // pulled within the policy's pulled_within since the plan
	// ChangedCheckFail: the fresh state could not be read; kept. Spelled
	// as reclaim.ReasonCheckFailed, so the same failure reads the same in
	// a GC report and an apply report (a test holds them equal).
	ChangedCheckFail LeftReason = "check_failed"
	// ChangedDeleteErr: the delete failed; kept. Spelled as
	// reclaim.ReasonDeleteFailed.
	ChangedDeleteErr LeftReason = "delete_failed"
)

var leftReasons = enum.Strings("retention.LeftReason",
	ChangedInUse, ChangedPinned, ChangedTagMoved, ChangedTagGone, ChangedPulled, ChangedCheckFail, ChangedDeleteErr)

func (r LeftReason) String() string { return leftReasons.String(r) }

// MarshalText encodes the name; a reason outside the set is an error.
func (r LeftReason) MarshalText() ([]byte, error) { return leftReasons.MarshalText(r) }

// UnmarshalText decodes a name, strictly.
func (r *LeftReason) UnmarshalText(b []byte) error { return leftReasons.UnmarshalText(b, r) }

// AbortError stops a run before it deletes anything more.
// It is also what an apply report says when apply stopped (its JSON).
type AbortError struct {
	Reason reclaim.AbortReason `json:"reason"`
	Detail string              `json:"detail"`
}

func (e *AbortError) Error() string {
	return fmt.Sprintf("retention: run aborted (%s): %s", e.Reason, e.Detail)
}

func abort(reason reclaim.AbortReason, format string, args ...any) error {
	return &AbortError{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

// Skip says why a repository was not planned.
type Skip struct {
	Reason SkipReason `json:"reason"`
	Detail string     `json:"detail"`
}

// Errors of apply.
var (
	// ErrPlanExpired: the plan is older than retention.planmaxage.
	ErrPlanExpired = errors.New("retention: plan too old to apply; preview again")
	// ErrPolicyChanged: the policy in force is not the plan's.
	ErrPolicyChanged = errors.New("retention: the policy changed since the plan was made; preview again")
	// ErrPlanNotFound: the plan store (Redis, shared by every instance) holds
	// no such plan for this repository, or it expired (a GC plan that is
	// not there is collector.ErrPlanNotInMemory).
	ErrPlanNotFound = errors.New("retention: plan not found")
	// ErrPlanSkipped: the plan skipped its repository; there is nothing to apply.
	ErrPlanSkipped = errors.New("retention: the plan skipped its repository; nothing to apply")
)
