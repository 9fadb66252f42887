package collector

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/reclaim-registry/reclaim/internal/pause"
	"github.com/reclaim-registry/reclaim/reclaim"
)

// A delete runs under its fence's lease, renewed while it runs. The fence
// holds for a full lease after each successful confirmation, so a delete
// abandoned half a lease after the last one leaves half a lease for the
// renewal's own round trip, the release and any difference in clock rate
// between this process and Redis.
const (
	deleteRenewPart = 3 // renew every lease/3
	deleteGracePart = 2 // abandon lease/2 after the last confirmation
	deleteMaxLeases = 5 // abandon after 5 leases in all, however renewed
)

// The causes of a guarded delete cut short.
var (
	errFenceLostDuringDelete = errors.New("fence lost while the delete ran")
	errDeleteDeadline        = errors.New("delete deadline passed")
)

// leaseClock times the renewals and deadlines of guarded deletes (Redis
// times the lease itself). Tests replace it to pass time without sleeping.
type leaseClock interface {
	Now() time.Time
	// Wait waits for d; false when ctx ended first.
	Wait(ctx context.Context, d time.Duration) bool
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Wait(ctx context.Context, d time.Duration) bool { return pause.For(ctx, d) == nil }

// guardedDelete confirms h, then runs del while h keeps fencing the object.
// A renewer confirms h every lease/3; del's context is cancelled as soon as
// a renewal finds the fence lost (ErrFenceLost), half a lease after the last
// successful confirmation (renewals failing: the fence may run out unseen),
// or 5 leases after the start. So del never runs past its fence, however
// long the storage takes.
//
// A zero Reason means del ran to its end under the fence; err is then
// del's. Otherwise the object is kept with the reason (fence_lost,
// delete_timeout; check_failed or delete_failed when the run itself was
// stopped): del was refused, or cut short, possibly after part of the
// storage delete happened (docs/gc-protocol.md, "The fence lease").
func (dl *deleter) guardedDelete(ctx context.Context, h reclaim.Hold, del func(context.Context) error) (reclaim.Reason, string, error) {
	if ctx.Err() != nil {
		return reclaim.ReasonCheckFailed, fmt.Sprintf("run stopped: %v", context.Cause(ctx)), nil
	}
	start := dl.c.clock.Now()
	if r, detail := confirm(ctx, h); r != reasonInvalid {
		return r, detail, nil
	}
	dctx, cancel := context.WithCancelCause(ctx)
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		dl.renew(dctx, cancel, h, start)
	}()
	err := del(dctx)
	// Read before the renewer is stopped: a loss found after del returned
	// does not make a finished delete a cut-short one.
	cause := context.Cause(dctx)
	cancel(nil)
	<-exited
	if cause == nil {
		return reasonInvalid, "", err
	}
	r := reclaim.ReasonDeleteFailed // the run was stopped (its lock lost)
	switch {
	case errors.Is(cause, errFenceLostDuringDelete):
		r = reclaim.ReasonFenceLost
	case errors.Is(cause, errDeleteDeadline):
		r = reclaim.ReasonDeleteTimeout
	}
	if err == nil {
		return r, fmt.Sprintf("%v; the storage delete had finished anyway (a driver that ignores cancellation)", cause), nil
	}
	return r, fmt.Sprintf("%v; delete cancelled: %v", cause, err), nil
}

// renew confirms h every lease/3 until ctx ends, and cancels ctx when the
// fence is lost or a deadline passes. start is when the confirmation right
// before the delete was sent.
func (dl *deleter) renew(ctx context.Context, cancel context.CancelCauseFunc, h reclaim.Hold, start time.Time) {
	clk, lease := dl.c.clock, dl.c.cfg.FenceLease
	hard := start.Add(deleteMaxLeases * lease)
	lastOK := start
	var lastErr error
	for {
		deadline := lastOK.Add(lease / deleteGracePart)
		if hard.Before(deadline) {
			deadline = hard
		}
		now := clk.Now()
		if !now.Before(deadline) {
			why := fmt.Sprintf("still deleting after %d fence leases", deleteMaxLeases)
			if deadline.Before(hard) {
				why = "fence not confirmed within half its lease"
				if lastErr != nil {
					why += ": " + lastErr.Error()
				}
			}
			cancel(fmt.Errorf("%w: %s", errDeleteDeadline, why))
			return
		}
		if !clk.Wait(ctx, min(lease/deleteRenewPart, deadline.Sub(now))) {
			return
		}
		now = clk.Now()
		if !now.Before(deadline) {
			continue
		}
		// Sent at now: the renewed lease runs from no earlier than that.
		rctx, rcancel := context.WithTimeout(ctx, deadline.Sub(now))
		err := h.Confirm(rctx)
		rcancel()
		switch {
		case err == nil:
			lastOK, lastErr = now, nil
		case errors.Is(err, reclaim.ErrFenceLost):
			cancel(fmt.Errorf("%w: %v", errFenceLostDuringDelete, err))
			return
		case ctx.Err() != nil:
			return
		default:
			lastErr = err // Redis trouble: try again until the deadline
		}
	}
}

// confirm renews h right before the delete it guards. A zero Reason means
// the delete may go ahead.
func confirm(ctx context.Context, h reclaim.Hold) (reclaim.Reason, string) {
	switch err := h.Confirm(ctx); {
	case err == nil:
		return reasonInvalid, ""
	case errors.Is(err, reclaim.ErrFenceLost):
		return reclaim.ReasonFenceLost, err.Error()
	default:
		return reclaim.ReasonCheckFailed, fmt.Sprintf("confirm fence: %v", err)
	}
}
