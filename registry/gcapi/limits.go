package gcapi

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"golang.org/x/sync/semaphore"
)

// Large request bodies. An in-use upload may be up to maxInUseBody (32
// MiB); while it is decoded and stored it costs about twice its size in
// memory (the images it lists, then their Redis command), so four at once
// took an instance from 217 to 745 MB. The bodies an instance reads at
// once are bounded in bytes: bodyBudget in all, each upload counted at its
// Content-Length (at maxInUseBody when it sends none). An upload that does
// not fit waits up to bodyWait for the others to finish, then is refused
// with 429 TOO_MANY_REQUESTS and Retry-After. Bodies of at most maxBody
// (every other endpoint) are not counted.
const (
	bodyBudget = 2 * maxInUseBody
	bodyWait   = 5 * time.Second
	// retryAfterBusy is the Retry-After of a 429: seconds.
	retryAfterBusy = "5"
)

// errTooMany refuses a request that would exceed a per-instance bound
// (large bodies here, dry runs in gc): 429, retry after a few seconds.
var errTooMany = codeTooMany.err("too many concurrent requests")

// bodyLimiter bounds the bytes of large request bodies read at once.
type bodyLimiter struct {
	sem    *semaphore.Weighted
	budget int64
	wait   time.Duration
	// test hooks: waiting is called when a body must wait for room,
	// held once its bytes are reserved.
	waiting, held func()
}

func newBodyLimiter(budget int64, wait time.Duration) *bodyLimiter {
	return &bodyLimiter{sem: semaphore.NewWeighted(budget), budget: budget, wait: wait}
}

// acquire reserves room for r's body of at most limit bytes, and returns
// what gives it back. A body over limit is refused at once (413), before
// it is read.
func (l *bodyLimiter) acquire(r *http.Request, limit int64) (release func(), err error) {
	n := limit
	switch {
	case r.ContentLength > limit:
		return nil, fmt.Errorf("%w: over %d bytes", errTooLarge, limit)
	case r.ContentLength >= 0 && r.ContentLength <= maxBody:
		return func() {}, nil
	case r.ContentLength > 0:
		n = r.ContentLength
	}
	if !l.sem.TryAcquire(n) {
		if l.waiting != nil {
			l.waiting()
		}
		ctx, cancel := context.WithTimeout(r.Context(), l.wait)
		defer cancel()
		if err := l.sem.Acquire(ctx, n); err != nil {
			if cerr := r.Context().Err(); cerr != nil {
				return nil, cerr
			}
			return nil, fmt.Errorf("%w: this instance is already reading %d MiB of upload bodies, its bound; waited %s: retry later",
				errTooMany, l.budget>>20, l.wait)
		}
	}
	if l.held != nil {
		l.held()
	}
	return func() { l.sem.Release(n) }, nil
}
