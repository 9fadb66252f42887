// Package pause holds the one wait that every retry, poll and interval
// loop uses: sleep for a while, unless the work is called off first.
package pause

import (
	"context"
	"time"
)

// For waits d, or until ctx ends; then it returns ctx's error. Its timer
// is stopped either way, so a loop that is called off leaves none behind.
func For(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
