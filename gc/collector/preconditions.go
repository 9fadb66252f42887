package collector

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/reclaim-registry/reclaim/reclaim"
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
	// blockers are the preconditions that do not hold: a real run with a
	// run-wide one aborts; a dry run plans anyway and lists them.
	blockers []Blocker
}

// What a Blocker stops.
const (
	BlocksRun   = "run"   // a real run aborts and deletes nothing
	BlocksBlobs = "blobs" // a real run unlinks, but deletes no blob
)

// Blocker is a precondition of a real run that does not hold now. A dry
// run (a preview) still builds the whole plan and lists its blockers, so
// an operator sees what a run would delete and what it waits for.
type Blocker struct {
	Reason reclaim.AbortReason `json:"reason"`
	// Blocks is BlocksRun or BlocksBlobs.
	Blocks string `json:"blocks"`
	Detail string `json:"detail,omitempty"`
	// Until is when the blocker clears by itself, when it does
	// (redis_recording_too_short: the recording epoch plus the window).
	Until *time.Time `json:"until,omitempty"`

	err error // the abort a real run returns for it
}

// refusal is the abort of the first run-wide blocker, nil when none.
func (tr trust) refusal() error {
	for _, b := range tr.blockers {
		if b.Blocks == BlocksRun {
			return b.err
		}
	}
	return nil
}

// preconditions are shared by a collection and a reclaimer tick, and fail
// closed: an *AbortError means nothing may be deleted. A link database not
// known to be complete is no abort here (a collection may still unlink);
// a completeness marker that cannot be read is, like any unreadable storage.
func (c *Collector) preconditions(ctx context.Context) (trust, error) {
	tr, err := c.assess(ctx)
	if err == nil {
		err = tr.refusal()
	}
	if err != nil {
		return trust{}, err
	}
	return tr, nil
}

// assess checks the preconditions for a run that may only plan. It fails
// (an *AbortError) only when nothing could be planned: Redis or the
// completeness marker cannot be read. A recording epoch that is missing,
// too young or at risk of eviction is a run-wide blocker: the access
// records read are then only what Redis happens to hold, which is enough
// to preview, never to delete.
func (c *Collector) assess(ctx context.Context) (trust, error) {
	since, err := c.tracker.RecordingSince(ctx)
	var tr trust
	switch {
	case errors.Is(err, reclaim.ErrRedisEvicts):
		tr.block(reclaim.AbortRedisEvicts, err, nil)
	case errors.Is(err, reclaim.ErrNotRecording):
		tr.block(reclaim.AbortRedisUntrusted, err, nil)
	case err != nil:
		return trust{}, abort(reclaim.AbortRedisUnavailable, err)
	}
	now, cerr := c.clockNow(ctx)
	if cerr != nil {
		return trust{}, abort(reclaim.AbortRedisUnavailable, cerr)
	}
	tr.now = now
	if err == nil && tr.now.Sub(since) < c.cfg.Window {
		until := since.Add(c.cfg.Window).UTC()
		tr.block(reclaim.AbortRedisRecordingTooShort, fmt.Errorf("recording since %s, less than the window %s",
			since.UTC().Format(time.RFC3339), c.cfg.Window), &until)
	}
	if c.cfg.LinkDBComplete == nil {
		tr.linkdbNote = "no completeness check configured"
	} else {
		ok, err := c.cfg.LinkDBComplete(ctx)
		switch {
		case err != nil:
			return trust{}, abort(reclaim.AbortStorageUnreadable, fmt.Errorf("completeness marker: %w", err))
		case !ok:
			tr.linkdbNote = "run `registry linkdb rebuild` to complete it"
		default:
			tr.linkdbOK = true
		}
	}
	if !tr.linkdbOK {
		tr.blockers = append(tr.blockers, Blocker{Reason: reclaim.AbortLinkDBIncomplete, Blocks: BlocksBlobs,
			Detail: "the reverse-link database is not known to be complete: " + tr.linkdbNote})
	}
	return tr, nil
}

// block records a run-wide blocker.
func (tr *trust) block(r reclaim.AbortReason, err error, until *time.Time) {
	tr.blockers = append(tr.blockers, Blocker{Reason: r, Blocks: BlocksRun, Detail: err.Error(), Until: until, err: abort(r, err)})
}

// clockNow reads the clock access records are compared against: Redis's
// (Config.Clock), else the local one.
func (c *Collector) clockNow(ctx context.Context) (time.Time, error) {
	if c.cfg.Clock == nil {
		return c.cfg.Now(), nil
	}
	return c.cfg.Clock.Now(ctx)
}
