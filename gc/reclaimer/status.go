package reclaimer

import (
	"context"
	"time"

	"github.com/reclaim-registry/reclaim/gc"
	"github.com/reclaim-registry/reclaim/reclaim"
)

// TickReport is what one tick did.
type TickReport struct {
	Started  time.Time
	Duration time.Duration
	// Abort is set when the tick stopped before claiming anything.
	Abort     reclaim.AbortReason
	Err       error
	Decisions []gc.Decision
	// Failed is true when the tick counts as failing (backoff).
	Failed bool
	// UsageRefreshed and UsageFailed count the usage estimates the tick
	// refreshed and failed to (usage.go).
	UsageRefreshed, UsageFailed int
	// Scrub is what the tick's scrub did (scrub.go).
	Scrub ScrubReport
	// Purged counts the expired trash entries the tick purged.
	Purged int
}

// Deleted counts the deletions of the tick.
func (t TickReport) Deleted() (n int, bytes int64) {
	for _, d := range t.Decisions {
		if d.Deleted() {
			n++
			bytes += d.Size
		}
	}
	return n, bytes
}

// Status is the reclaimer's state for GET /gc/v1/status.
type Status struct {
	Enabled        bool             `json:"enabled"`
	IntervalSecs   float64          `json:"interval_seconds"`
	Batch          int              `json:"batch"`
	WindowSecs     int64            `json:"window_seconds"`
	LastTick       time.Time        `json:"last_tick,omitzero"`
	LastTickMS     int64            `json:"last_tick_ms"`
	LastAbort      string           `json:"last_abort,omitempty"`
	Ticks          int64            `json:"ticks"`
	FailedTicks    int64            `json:"failed_ticks"`
	Reviewed       int64            `json:"reviewed"`
	Deleted        int64            `json:"deleted"`
	BytesFreed     int64            `json:"bytes_freed"`
	DeletedBy      map[string]int64 `json:"deleted_by_reason"`
	KeptBy         map[string]int64 `json:"kept_by_reason"`
	LastError      string           `json:"last_error,omitempty"`
	LastErrorAt    time.Time        `json:"last_error_at,omitzero"`
	BackoffSecs    float64          `json:"backoff_seconds,omitempty"`
	QueueLength    int64            `json:"queue_length"`
	Due            int64            `json:"due"`
	QueueError     string           `json:"queue_error,omitempty"`
	ReviewedPerSec float64          `json:"reviewed_per_second"`
	UsageRefreshed int64            `json:"usage_refreshed"`
	UsageFailed    int64            `json:"usage_failed"`
	// The scrub, summed over this process's ticks: repositories and
	// forward links checked, missing reverse links written back, reads
	// and writes that failed; ScrubRepos is the per-tick budget.
	ScrubRepos        int   `json:"scrub_repos"`
	ScrubRepositories int64 `json:"scrub_repositories"`
	ScrubLinks        int64 `json:"scrub_links"`
	ScrubRepaired     int64 `json:"scrub_repaired"`
	ScrubFailed       int64 `json:"scrub_failed"`
	ScrubMarkedLinkDB bool  `json:"scrub_marked_linkdb_incomplete,omitempty"`
}

func (r *Reclaimer) record(rep TickReport) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := &r.st
	st.Ticks++
	st.LastTick, st.LastTickMS = rep.Started, rep.Duration.Milliseconds()
	// An abort that persists (a young epoch lasts a whole window) is
	// logged when it starts, not on every tick.
	quiet := rep.Abort != "" && !rep.Failed && string(rep.Abort) == st.LastAbort
	st.LastAbort = string(rep.Abort)
	r.busy += rep.Duration
	if rep.Failed {
		st.FailedTicks++
	}
	if rep.Err != nil {
		st.LastError, st.LastErrorAt = rep.Err.Error(), time.Now()
		if !quiet {
			r.cfg.Logf("reclaimer: tick: %v", rep.Err)
		}
	}
	st.UsageRefreshed += int64(rep.UsageRefreshed)
	st.UsageFailed += int64(rep.UsageFailed)
	st.ScrubRepositories += int64(rep.Scrub.Repositories)
	st.ScrubLinks += int64(rep.Scrub.Links)
	st.ScrubRepaired += int64(rep.Scrub.Repaired)
	st.ScrubFailed += int64(rep.Scrub.Failed)
	st.ScrubMarkedLinkDB = st.ScrubMarkedLinkDB || rep.Scrub.Unmarked
	for _, d := range rep.Decisions {
		st.Reviewed++
		if d.Deleted() {
			st.Deleted++
			st.BytesFreed += d.Size
			st.DeletedBy[d.Reason.String()]++
		} else {
			st.KeptBy[d.Reason.String()]++
		}
	}
	if r.busy > 0 {
		st.ReviewedPerSec = float64(st.Reviewed) / r.busy.Seconds()
	}
}

// Status returns the counters and, from the queue, its length and due count.
func (r *Reclaimer) Status(ctx context.Context) Status {
	r.mu.Lock()
	st := r.st
	st.DeletedBy, st.KeptBy = copyCounts(r.st.DeletedBy), copyCounts(r.st.KeptBy)
	r.mu.Unlock()
	total, due, err := r.q.Len(ctx)
	if err != nil {
		st.QueueError = err.Error()
	}
	st.QueueLength, st.Due = total, due
	return st
}

func firstFailure(decs []gc.Decision) string {
	for _, d := range decs {
		if d.Reason == reclaim.ReasonCheckFailed || d.Reason == reclaim.ReasonDeleteFailed {
			return d.Digest.String() + ": " + d.Detail
		}
	}
	return ""
}

func copyCounts(m map[string]int64) map[string]int64 {
	out := make(map[string]int64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
