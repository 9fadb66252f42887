package gc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/opencontainers/go-digest"
	"golang.org/x/sync/errgroup"
)

// The reclaimer frees blobs that lost their last reference without anybody
// walking the registry. The storage middleware queues a blob for review
// (due W later) whenever one of its reverse links is removed and whenever an
// upload is committed; every registry instance may run a reclaimer; each
// tick claims a batch of due items and gives each the same deletion step a
// collection gives a blob whose last link it removed (runState.deleteBlob):
//
//	reverse links listed: any -> dropped (linked_elsewhere); the next unlink queues it again
//	accessed within W      -> re-queued at last access + W (recently_accessed)
//	fence the blob (refused if accessed meanwhile), list reverse links again,
//	delete the blob directory through the wrapped driver, evict, release
//
// A tick deletes nothing when the tracker cannot be trusted (Redis down,
// epoch missing or younger than W) or the reverse-link database is not known
// to be complete; the items stay queued. A claim is a lease: an instance
// that dies mid-batch leaves its items to come back after the lease, and the
// fence, not the lease, is what keeps two deleters apart.

// Defaults of the reclaimer.
const (
	DefaultReclaimInterval = time.Minute
	DefaultReclaimBatch    = 100
	defaultReclaimWorkers  = 4
)

// AbortLinkDBIncomplete stops a reclaimer tick: the reverse-link database is
// not known to be complete, so an empty reverse-link list proves nothing.
const AbortLinkDBIncomplete AbortReason = "linkdb_incomplete"

// QueueItem is one claimed review item. Lease is the queue's token for the
// claim; the reclaimer hands it back unchanged.
type QueueItem struct {
	Blob  digest.Digest
	Due   time.Time
	Lease int64
}

// Queue is the review queue the reclaimer consumes.
type Queue interface {
	// Claim takes up to n due items and holds them for lease: nobody else
	// claims them until it runs out.
	Claim(ctx context.Context, n int, lease time.Duration) ([]QueueItem, error)
	// Done removes a reviewed item (unless it was queued again meanwhile).
	Done(ctx context.Context, it QueueItem) error
	// Requeue makes an item due again at due.
	Requeue(ctx context.Context, it QueueItem, due time.Time) error
	// Len is the number of queued items and of those due now.
	Len(ctx context.Context) (total, due int64, err error)
}

// ReclaimerConfig tunes a Reclaimer. The window W, the fence lease, the
// tracker and the storage come from the Collector it is built on.
type ReclaimerConfig struct {
	// Enabled is the kill switch: false means the reclaimer never claims,
	// never deletes.
	Enabled bool
	// Interval between ticks (default 1m). A tick that found a full batch
	// is followed by the next one at once.
	Interval time.Duration
	// Batch is the number of items claimed per tick (default 100).
	Batch int
	// Workers review a batch in parallel (default 4).
	Workers int
	// Lease is how long a claim holds its items (default: the larger of
	// 10 intervals and a minute). An item whose review failed, or whose
	// claimer died, comes back after it. It only saves duplicate work: the
	// fence, not the lease, keeps two deleters apart.
	Lease time.Duration
	// MaxBackoff bounds the wait after failing ticks (default 16 intervals).
	MaxBackoff time.Duration
	// Logf logs tick failures; nil discards them.
	Logf func(format string, args ...any)
	// Observe, when set, sees every decision and every tick (metrics).
	Observe func(TickReport)
}

// TickReport is what one tick did.
type TickReport struct {
	Started  time.Time
	Duration time.Duration
	// Abort is set when the tick stopped before claiming anything.
	Abort     AbortReason
	Err       error
	Decisions []Decision
	// Failed is true when the tick counts as failing (backoff).
	Failed bool
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

// ReclaimerStatus is the reclaimer's state for GET /gc/v1/status.
type ReclaimerStatus struct {
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
}

// Reclaimer reviews queued blobs in the background.
type Reclaimer struct {
	c   *Collector
	q   Queue
	cfg ReclaimerConfig

	mu       sync.Mutex
	st       ReclaimerStatus
	failures int
	busy     time.Duration // time spent in ticks, for the rate
}

// NewReclaimer returns a reclaimer deleting through c's storage and tracker.
func NewReclaimer(c *Collector, q Queue, cfg ReclaimerConfig) (*Reclaimer, error) {
	if c == nil || q == nil {
		return nil, errors.New("gc: NewReclaimer needs a Collector and a Queue")
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultReclaimInterval
	}
	if cfg.Batch == 0 {
		cfg.Batch = DefaultReclaimBatch
	}
	if cfg.Workers == 0 {
		cfg.Workers = defaultReclaimWorkers
	}
	if cfg.Interval < 0 || cfg.Batch < 0 || cfg.Workers < 0 || cfg.Lease < 0 || cfg.MaxBackoff < 0 {
		return nil, fmt.Errorf("gc: reclaimer: interval, batch, workers, lease and backoff must not be negative: %+v", cfg)
	}
	if cfg.Lease == 0 {
		cfg.Lease = max(10*cfg.Interval, time.Minute)
	}
	if cfg.MaxBackoff == 0 {
		cfg.MaxBackoff = 16 * cfg.Interval
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	r := &Reclaimer{c: c, q: q, cfg: cfg}
	r.st = ReclaimerStatus{Enabled: cfg.Enabled, IntervalSecs: cfg.Interval.Seconds(), Batch: cfg.Batch,
		WindowSecs: int64(c.cfg.Window / time.Second), DeletedBy: map[string]int64{}, KeptBy: map[string]int64{}}
	return r, nil
}

// Enabled reports the kill switch.
func (r *Reclaimer) Enabled() bool { return r.cfg.Enabled }

// Run ticks until ctx is done. It never returns early on errors: a failing
// tick is logged and counted, and the next one waits longer (exponential
// backoff up to MaxBackoff). With the kill switch off it returns at once.
func (r *Reclaimer) Run(ctx context.Context) {
	if !r.cfg.Enabled {
		return
	}
	wait := r.cfg.Interval
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		rep := r.Tick(ctx)
		wait = r.next(rep)
	}
}

// next is the wait after a tick: at once after a full healthy batch, the
// interval after a normal tick, a growing backoff after failing ones.
func (r *Reclaimer) next(rep TickReport) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rep.Failed {
		r.failures++
		b := r.cfg.Interval << min(r.failures, 16)
		if b <= 0 || b > r.cfg.MaxBackoff {
			b = r.cfg.MaxBackoff
		}
		r.st.BackoffSecs = b.Seconds()
		return b
	}
	r.failures, r.st.BackoffSecs = 0, 0
	if rep.Abort == "" && len(rep.Decisions) >= r.cfg.Batch {
		return 0
	}
	return r.cfg.Interval
}

// Tick claims one batch of due items and reviews each. It never panics on
// storage or Redis failures; they are in the report.
func (r *Reclaimer) Tick(ctx context.Context) TickReport {
	rep := TickReport{Started: time.Now()}
	if !r.cfg.Enabled {
		rep.Err = ErrDisabled
		return rep
	}
	func() {
		// A bug in one review must not take the server down with it.
		defer func() {
			if v := recover(); v != nil {
				rep.Err, rep.Failed = fmt.Errorf("panic in tick: %v", v), true
			}
		}()
		r.tick(ctx, &rep)
	}()
	rep.Duration = time.Since(rep.Started)
	r.record(rep)
	if r.cfg.Observe != nil {
		r.cfg.Observe(rep)
	}
	return rep
}

func (r *Reclaimer) tick(ctx context.Context, rep *TickReport) {
	rs, err := r.preconditions(ctx)
	if err != nil {
		var ae *AbortError
		if errors.As(err, &ae) {
			rep.Abort = ae.Reason
			// Redis down is a failure to back off from; a young epoch or an
			// incomplete link database is a normal state that passes.
			rep.Failed = ae.Reason == AbortRedisUnavailable || ae.Reason == AbortStorageUnreadable
		} else {
			rep.Failed = true
		}
		rep.Err = err
		return
	}
	ctx = rs.ctx
	items, err := r.q.Claim(ctx, r.cfg.Batch, r.cfg.Lease)
	if err != nil {
		rep.Err, rep.Failed = fmt.Errorf("claim: %w", err), true
		return
	}
	decs := make([]Decision, len(items))
	scratch := make([]*Report, len(items))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(r.cfg.Workers, 1))
	for i, it := range items {
		g.Go(func() error {
			defer func() {
				if v := recover(); v != nil {
					decs[i] = Decision{Kind: KindBlob, Digest: it.Blob, Reason: CheckFailed, Detail: fmt.Sprintf("panic: %v", v)}
				}
			}()
			if gctx.Err() != nil {
				// not reviewed: the item comes back after its lease
				decs[i] = Decision{Kind: KindBlob, Digest: it.Blob, Reason: CheckFailed, Detail: "tick cancelled"}
				return nil
			}
			scratch[i] = &Report{}
			decs[i] = r.review(gctx, rs, it, scratch[i])
			return nil
		})
	}
	_ = g.Wait()
	failed := 0
	for i, d := range decs {
		if d.Reason == CheckFailed || d.Reason == DeleteFailed {
			failed++
		}
		if scratch[i] != nil {
			for _, e := range scratch[i].Errors {
				r.cfg.Logf("reclaimer: %s %s: %s", e.Reason, e.Digest, e.Detail)
			}
		}
	}
	rep.Decisions = decs
	if failed > 0 {
		rep.Err = fmt.Errorf("%d of %d reviews failed (first: %s)", failed, len(decs), firstFailure(decs))
		// one blip is not worth a backoff; a batch that failed entirely is
		rep.Failed = failed == len(decs)
	}
}

func firstFailure(decs []Decision) string {
	for _, d := range decs {
		if d.Reason == CheckFailed || d.Reason == DeleteFailed {
			return d.Digest.String() + ": " + d.Detail
		}
	}
	return ""
}

// tickState is a runState for the reclaimer: no repository, the link
// database checked complete, "now" from the tracker's clock.
type tickState struct {
	*runState
	ctx context.Context
}

// preconditions are the collection's, plus the link database: fail closed.
func (r *Reclaimer) preconditions(ctx context.Context) (*tickState, error) {
	c := r.c
	if c.cfg.Context != nil {
		ctx = c.cfg.Context(ctx)
	}
	since, err := c.tracker.RecordingSince(ctx)
	switch {
	case errors.Is(err, ErrRedisEvicts):
		return nil, abort(AbortRedisEvicts, err)
	case errors.Is(err, ErrNotRecording):
		return nil, abort(AbortRedisUntrusted, err)
	case err != nil:
		return nil, abort(AbortRedisUnavailable, err)
	}
	now := c.cfg.Now()
	if clk, ok := c.tracker.(Clock); ok {
		if now, err = clk.Now(ctx); err != nil {
			return nil, abort(AbortRedisUnavailable, err)
		}
	}
	if now.Sub(since) < c.cfg.Window {
		return nil, abort(AbortRedisRecordingTooShort,
			fmt.Errorf("recording since %s, less than the window %s", since.UTC().Format(time.RFC3339), c.cfg.Window))
	}
	if c.cfg.LinkDBComplete == nil {
		return nil, abort(AbortLinkDBIncomplete, errors.New("no completeness check configured"))
	}
	ok, err := c.cfg.LinkDBComplete(ctx)
	switch {
	case err != nil:
		return nil, abort(AbortStorageUnreadable, fmt.Errorf("completeness marker: %w", err))
	case !ok:
		return nil, abort(AbortLinkDBIncomplete, errors.New("run `registry linkdb rebuild` to complete it"))
	}
	rs := &runState{c: c, window: c.cfg.Window, now: now, linkdbOK: true}
	return &tickState{runState: rs, ctx: ctx}, nil
}

// review decides one item with the collection's blob step and settles it
// in the queue.
func (r *Reclaimer) review(ctx context.Context, ts *tickState, it QueueItem, scratch *Report) Decision {
	dec := ts.deleteBlob(ctx, it.Blob, scratch)
	var qerr error
	switch dec.Reason {
	case Unreferenced, AlreadyGone, LinkedElsewhere, StillLinked:
		// Deleted, or linked: a later unlink queues it again.
		qerr = r.q.Done(ctx, it)
	case RecentlyAccessed:
		due := ts.now.Add(r.c.cfg.Window)
		if dec.LastAccess != nil {
			due = dec.LastAccess.Add(r.c.cfg.Window)
		}
		// The fence may have seen an access newer than the one read
		// before it: never re-claim before the next interval.
		due = maxTime(due, ts.now.Add(r.cfg.Interval))
		qerr = r.q.Requeue(ctx, it, due)
	case Fenced:
		// Someone else is deleting it right now; look again soon.
		qerr = r.q.Requeue(ctx, it, ts.now.Add(r.cfg.Interval))
	default:
		// CheckFailed, DeleteFailed: left claimed, it comes back after the
		// lease, which is the backoff for one bad blob.
	}
	if qerr != nil {
		scratch.Errors = append(scratch.Errors, Decision{Kind: KindBlob, Digest: it.Blob, Reason: CheckFailed,
			Detail: fmt.Sprintf("settle queue item: %v", qerr)})
	}
	return dec
}

// Review runs the deletion step on one blob now, outside the queue (the
// slow-path sweep uses it). The preconditions of a tick apply.
func (r *Reclaimer) Review(ctx context.Context, blob digest.Digest) (Decision, error) {
	if !r.cfg.Enabled {
		return Decision{}, ErrDisabled
	}
	ts, err := r.preconditions(ctx)
	if err != nil {
		return Decision{}, err
	}
	scratch := &Report{}
	dec := ts.deleteBlob(ts.ctx, blob, scratch)
	if len(scratch.Errors) > 0 {
		return dec, fmt.Errorf("%s", scratch.Errors[0].Detail)
	}
	return dec, nil
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
func (r *Reclaimer) Status(ctx context.Context) ReclaimerStatus {
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

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func copyCounts(m map[string]int64) map[string]int64 {
	out := make(map[string]int64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
