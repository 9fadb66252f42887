package reclaim

import "errors"

// Errors of the access tracker, shared by the middleware, GC and the link
// database tools so that none of them translates another's. The tracker
// wraps them (with %w); callers branch with errors.Is.
var (
	// ErrFenced: registry side, the object is being deleted by GC; GC side,
	// another GC step holds the fence.
	ErrFenced = errors.New("object is fenced for deletion")
	// ErrRecentlyAccessed: the object was accessed within the window.
	ErrRecentlyAccessed = errors.New("object accessed within the protection window")
	// ErrFenceLost: a fence expired or was taken away before the delete it guards.
	ErrFenceLost = errors.New("fence expired before the delete")
	// ErrNotRecording: the recording epoch is missing (Redis lost its data
	// or never recorded); access records cannot prove anything.
	ErrNotRecording = errors.New("access tracker is not recording (epoch missing)")
	// ErrRedisEvicts: Redis may evict access records (its maxmemory-policy
	// is not noeviction), so their absence proves nothing.
	ErrRedisEvicts = errors.New("redis may evict access records (maxmemory-policy is not noeviction)")
	// ErrRepositoryBusy: another GC run holds the repository (on any
	// instance); retry later.
	ErrRepositoryBusy = errors.New("a collection is already running for this repository")
	// ErrLockLost: a run's repository lock expired or was taken away; the
	// run stopped, and what it deleted before is in its report.
	ErrLockLost = errors.New("repository lock lost")
	// ErrTrackerUnavailable wraps any failure to reach the tracker's Redis.
	ErrTrackerUnavailable = errors.New("access tracker (redis) unavailable")
)
