package collector

import (
	"errors"
	"fmt"

	"github.com/reclaim-registry/reclaim/reclaim"
)

// Errors returned before a run looks at anything: the request is wrong.
var (
	// ErrInvalidName: the repository name does not follow the reference grammar.
	ErrInvalidName = errors.New("gc: invalid repository name")
	// ErrRepositoryNotFound: the repository has no manifests and no layer links.
	ErrRepositoryNotFound = errors.New("gc: repository not found")
	// ErrPlanNotInMemory: this instance holds no plan with that id: it is
	// unknown, expired, or was made by another instance (a Plan lives in
	// the memory of the instance that made it; retention's plans, which
	// Redis keeps, answer retention.ErrPlanNotInMemory).
	ErrPlanNotInMemory = errors.New("gc: plan not found or expired")
	// ErrPlanRepository: the plan was made for another repository.
	ErrPlanRepository = errors.New("gc: plan belongs to another repository")
	// ErrDisabled: GC is switched off in the configuration.
	ErrDisabled = errors.New("gc: garbage collection is disabled")
)

// Errors returned when a run cannot start now; retry later. A run that
// cannot start because another holds the repository returns
// reclaim.ErrRepositoryBusy, one that lost its lock reclaim.ErrLockLost; a
// Tracker wraps the other errors of package reclaim (ErrFenced,
// ErrRecentlyAccessed, ErrFenceLost, ErrNotRecording, ErrRedisEvicts,
// ErrTrackerUnavailable) so the collector can branch on them.
var (
	// ErrAborted is matched (errors.Is) by every *AbortError: a precondition
	// failed and the run deleted nothing.
	ErrAborted = errors.New("gc: run aborted, nothing deleted")
	// ErrTooManyDryRuns: the instance already runs as many dry runs as it
	// allows (Config.DryRuns), and none ended within Config.DryRunWait.
	ErrTooManyDryRuns = errors.New("gc: too many dry runs at once on this instance")
)

// AbortError is a failed precondition. The run deleted nothing.
type AbortError struct {
	Reason reclaim.AbortReason
	Err    error
}

func (e *AbortError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("gc: aborted (%s)", e.Reason)
	}
	return fmt.Sprintf("gc: aborted (%s): %v", e.Reason, e.Err)
}

func (e *AbortError) Unwrap() error { return e.Err }

// Is makes every AbortError match ErrAborted.
func (e *AbortError) Is(target error) bool { return target == ErrAborted }

func abort(r reclaim.AbortReason, err error) error { return &AbortError{Reason: r, Err: err} }
