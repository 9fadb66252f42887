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
