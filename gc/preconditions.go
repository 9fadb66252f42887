package gc

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// trust is what the preconditions establish before anything is decided.
type trust struct {
	// now is the tracker's clock when it has one: access records are
	// compared against the clock that wrote them.
	now time.Time
	// linkdbOK: the reverse-link database is known to be complete, so an
	// empty reverse-link list means "linked nowhere". linkdbNote says why
	// not.
	linkdbOK   bool
	linkdbNote string
}

// preconditions are shared by a collection and a reclaimer tick, and fail
// closed: an *AbortError means nothing may be deleted. A link database not
// known to be complete is no abort here (a collection may still unlink);
// a completeness marker that cannot be read is, like any unreadable storage.
func (c *Collector) preconditions(ctx context.Context) (trust, error) {
	since, err := c.tracker.RecordingSince(ctx)
	switch {
	case errors.Is(err, ErrRedisEvicts):
		return trust{}, abort(AbortRedisEvicts, err)
	case errors.Is(err, ErrNotRecording):
		return trust{}, abort(AbortRedisUntrusted, err)
	case err != nil:
		return trust{}, abort(AbortRedisUnavailable, err)
	}
	tr := trust{now: c.cfg.Now()}
	if clk, ok := c.tracker.(Clock); ok {
		if tr.now, err = clk.Now(ctx); err != nil {
			return trust{}, abort(AbortRedisUnavailable, err)
		}
	}
	if tr.now.Sub(since) < c.cfg.Window {
		return trust{}, abort(AbortRedisRecordingTooShort,
			fmt.Errorf("recording since %s, less than the window %s", since.UTC().Format(time.RFC3339), c.cfg.Window))
	}
	if c.cfg.LinkDBComplete == nil {
		tr.linkdbNote = "no completeness check configured"
		return tr, nil
	}
	ok, err := c.cfg.LinkDBComplete(ctx)
	switch {
	case err != nil:
		return trust{}, abort(AbortStorageUnreadable, fmt.Errorf("completeness marker: %w", err))
	case !ok:
		tr.linkdbNote = "run `registry linkdb rebuild` to complete it"
	default:
		tr.linkdbOK = true
	}
	return tr, nil
}
