// Package pause holds the waits that every retry, poll and interval loop
// uses: sleep for a while, or do something every while, unless the work is
// called off first.
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

// Every calls fn every d, the first time d from now, until ctx ends. A call
// that takes longer than d delays the next one; none pile up.
func Every(ctx context.Context, d time.Duration, fn func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}

// EveryInBackground runs Every on a goroutine of its own until ctx ends or
// stop is called. stop returns once fn has returned for the last time, so
// what fn writes is not written after it; calling it again does nothing.
func EveryInBackground(ctx context.Context, d time.Duration, fn func()) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		Every(ctx, d, fn)
	}()
	return func() {
		cancel()
		<-exited
	}
}
