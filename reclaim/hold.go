package reclaim

import "context"

// A Hold is a fence a deleter holds on one object (redisstate's Fence is
// one; gc/collector deletes under them).
type Hold interface {
	// Confirm renews the fence for its lease and fails (wrapping
	// ErrFenceLost) if it expired or was taken away meanwhile: an expired
	// fence may have let a writer through, so the delete must not happen
	// or go on. It is called right before the delete, then every lease/3
	// while the delete runs, possibly from another goroutine.
	Confirm(ctx context.Context) error
	// Release gives the fence back after the delete.
	Release(ctx context.Context) error
}

// RunHandle is a repository lock that carries a run record (redisstate's
// run lock is one).
type RunHandle interface {
	// Held is cancelled as soon as the lock is known lost (expired, taken
	// away, not renewable); the run works under it.
	Held() context.Context
	// Progress writes p ahead of the work it announces; on error that
	// work must not be done.
	Progress(ctx context.Context, p RunProgress) error
	// End stores the run's outcome and report (before Unlock).
	End(ctx context.Context, status RunStatus, report []byte) error
	Unlock()
}
