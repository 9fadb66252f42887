package middleware

import (
	"context"

	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/internal/metrics"
	"github.com/reclaim-registry/reclaim/internal/rlog"
	"github.com/reclaim-registry/reclaim/redisstate"
)

// Queue returns the Env's review queue (same Redis and prefix as the tracker).
func (e *Env) Queue() *redisstate.Queue {
	return redisstate.NewQueue(e.Tracker.Client(), e.opts.Prefix, e.opts.Timeout)
}

var metricEnqueued = metrics.CounterVec("storage", "review_enqueued_total", "Blobs the middleware queued for review by the reclaimer, by cause (unlink, commit, takeback: a reverse link a request wrote and took back) and result (ok, error).", "cause", "result")

// enqueue is the middleware's hook: queue blob for review after the window,
// best effort. A lost enqueue is a leak the slow-path sweep finds, never a
// wrong delete, so a Redis failure here does not fail the request.
func (e *Env) enqueue(ctx context.Context, cause string, blob digest.Digest) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.opts.Timeout)
	defer cancel()
	if err := e.Queue().Enqueue(ctx, e.Window, blob); err != nil {
		metricEnqueued.WithLabelValues(cause, "error").Inc()
		rlog.From(ctx).WithError(err).WithField("blob", blob).Warn("reclaim: could not queue blob for review (a leak until `registry gc sweep`)")
		return
	}
	metricEnqueued.WithLabelValues(cause, "ok").Inc()
}
