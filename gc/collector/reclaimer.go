package collector

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/gc"
	"github.com/reclaim-registry/reclaim/reclaim"
	"golang.org/x/sync/errgroup"
)

// The reclaimer frees blobs that lost their last reference without anybody
// walking the registry. The storage middleware queues a blob for review
// (due W later) whenever one of its reverse links is removed and whenever an
// upload is committed; every registry instance may run a reclaimer; each
// tick claims a batch of due items and gives each the same deletion step a
// collection gives a blob whose last link it removed (deleter.deleteBlob):
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

// Queue is the review queue the reclaimer consumes.
type Queue interface {
	// Claim takes up to n due items and holds them for lease: nobody else
	// claims them until it runs out.
	Claim(ctx context.Context, n int, lease time.Duration) ([]reclaim.ReviewItem, error)
	// Done removes a reviewed item (unless it was queued again meanwhile).
	Done(ctx context.Context, it reclaim.ReviewItem) error
	// Requeue makes an item due again at due.
	Requeue(ctx context.Context, it reclaim.ReviewItem, due time.Time) error
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
	// UsageRefresh is how many repositories' usage estimates a tick
	// refreshes (default 4; < 0: none), UsageMaxAge the age past which an
	// estimate is refreshed (default 1h). They need the collector's Usage
	// store (reclaimer_usage.go).
	UsageRefresh int
	UsageMaxAge  time.Duration
	// ScrubRepos is how many repositories a tick scrubs for missing
	// reverse links (default 2; < 0: none), walking the catalog from
	// ScrubCursor. Without a cursor, or without the collector's Repair,
	// there is no scrub (reclaimer_scrub.go).
	ScrubRepos  int
	ScrubCursor ScrubCursor
	// Logf logs tick failures; nil discards them.
	Logf func(format string, args ...any)
	// Observe, when set, sees every decision and every tick (metrics).
	Observe func(TickReport)
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
	if cfg.UsageRefresh == 0 {
		cfg.UsageRefresh = DefaultUsageRefresh
	}
	if cfg.ScrubRepos == 0 {
		cfg.ScrubRepos = DefaultScrubRepos
	}
	if cfg.UsageMaxAge <= 0 {
		cfg.UsageMaxAge = DefaultUsageMaxAge
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
		WindowSecs: int64(c.cfg.Window / time.Second), ScrubRepos: scrubBudget(cfg, c), DeletedBy: map[string]int64{}, KeptBy: map[string]int64{}}
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
		r.refreshUsage(ctx, &rep)
		r.scrub(ctx, &rep)
	}()
	rep.Duration = time.Since(rep.Started)
	var freed int64
	var deleted int
	for _, d := range rep.Decisions {
		if d.Deleted() {
			freed, deleted = freed+d.Size, deleted+1
		}
	}
	r.c.countFreed(ctx, freed, deleted) // before the status says so
	r.record(rep)
	if r.cfg.Observe != nil {
		r.cfg.Observe(rep)
	}
	return rep
}

func (r *Reclaimer) tick(ctx context.Context, rep *TickReport) {
	ctx, dl, err := r.preconditions(ctx)
	if err != nil {
		var ae *AbortError
		if errors.As(err, &ae) {
			rep.Abort = ae.Reason
			// Redis down or storage unreadable is a failure to back off from; a young epoch or an
			// incomplete link database is a normal state that passes.
			rep.Failed = ae.Reason == reclaim.AbortRedisUnavailable || ae.Reason == reclaim.AbortStorageUnreadable
		} else {
			rep.Failed = true
		}
		rep.Err = err
		return
	}
	items, err := r.q.Claim(ctx, r.cfg.Batch, r.cfg.Lease)
	if err != nil {
		rep.Err, rep.Failed = fmt.Errorf("claim: %w", err), true
		return
	}
	decs := make([]gc.Decision, len(items))
	scratch := make([]*Report, len(items))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(r.cfg.Workers, 1))
	for i, it := range items {
		g.Go(func() error {
			defer func() {
				if v := recover(); v != nil {
					decs[i] = gc.Decision{Kind: reclaim.KindBlob, Digest: it.Blob, Reason: reclaim.ReasonCheckFailed, Detail: fmt.Sprintf("panic: %v", v)}
				}
			}()
			if gctx.Err() != nil {
				// not reviewed: the item comes back after its lease
				decs[i] = gc.Decision{Kind: reclaim.KindBlob, Digest: it.Blob, Reason: reclaim.ReasonCheckFailed, Detail: "tick cancelled"}
				return nil
			}
			scratch[i] = &Report{}
			decs[i] = r.review(gctx, dl, it, scratch[i])
			return nil
		})
	}
	_ = g.Wait()
	failed := 0
	for i, d := range decs {
		if d.Reason == reclaim.ReasonCheckFailed || d.Reason == reclaim.ReasonDeleteFailed {
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

// preconditions are the collection's (fail closed), and the link database
// must be known complete: the reclaimer only deletes blobs, and an empty
// reverse-link list proves nothing until it is. The deleter has no
// repository, so every reverse link is another repository's.
func (r *Reclaimer) preconditions(ctx context.Context) (context.Context, *deleter, error) {
	ctx = r.c.runContext(ctx)
	tr, err := r.c.preconditions(ctx)
	if err != nil {
		return nil, nil, err
	}
	if !tr.linkdbOK {
		return nil, nil, abort(reclaim.AbortLinkDBIncomplete, errors.New(tr.linkdbNote))
	}
	return ctx, &deleter{c: r.c, pol: policy{Policy: gc.Policy{Window: r.c.cfg.Window, Now: tr.now, LinkDBComplete: true}}}, nil
}

// review decides one item with the collection's blob step and settles it
// in the queue.
func (r *Reclaimer) review(ctx context.Context, dl *deleter, it reclaim.ReviewItem, scratch *Report) gc.Decision {
	dec := dl.deleteBlob(ctx, it.Blob, scratch)
	var qerr error
	switch dec.Reason {
	case reclaim.ReasonUnreferenced, reclaim.ReasonAlreadyGone, reclaim.ReasonLinkedElsewhere, reclaim.ReasonStillLinked:
		// Deleted, or linked: a later unlink queues it again.
		qerr = r.q.Done(ctx, it)
	case reclaim.ReasonRecentlyAccessed:
		due := dl.pol.Now.Add(r.c.cfg.Window)
		if dec.LastAccess != nil {
			due = dec.LastAccess.Add(r.c.cfg.Window)
		}
		// The fence may have seen an access newer than the one read
		// before it: never re-claim before the next interval.
		due = maxTime(due, dl.pol.Now.Add(r.cfg.Interval))
		qerr = r.q.Requeue(ctx, it, due)
	case reclaim.ReasonFenced:
		// Someone else is deleting it right now; look again soon.
		qerr = r.q.Requeue(ctx, it, dl.pol.Now.Add(r.cfg.Interval))
	default:
		// ReasonCheckFailed, ReasonDeleteFailed: left claimed, it comes back after the
		// lease, which is the backoff for one bad blob.
	}
	if qerr != nil {
		scratch.Errors = append(scratch.Errors, gc.Decision{Kind: reclaim.KindBlob, Digest: it.Blob, Reason: reclaim.ReasonCheckFailed,
			Detail: fmt.Sprintf("settle queue item: %v", qerr)})
	}
	return dec
}

// Review runs the deletion step on one blob now, outside the queue (the
// slow-path `registry gc sweep` uses it). The preconditions of a tick apply.
func (r *Reclaimer) Review(ctx context.Context, blob digest.Digest) (gc.Decision, error) {
	if !r.cfg.Enabled {
		return gc.Decision{}, ErrDisabled
	}
	ctx, dl, err := r.preconditions(ctx)
	if err != nil {
		return gc.Decision{}, err
	}
	scratch := &Report{}
	dec := dl.deleteBlob(ctx, blob, scratch)
	if len(scratch.Errors) > 0 {
		return dec, fmt.Errorf("%s", scratch.Errors[0].Detail)
	}
	return dec, nil
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// scrubBudget is the repositories a tick scrubs: none without a cursor or
// a way to write reverse links.
func scrubBudget(cfg ReclaimerConfig, c *Collector) int {
	if cfg.ScrubCursor == nil || c.cfg.Repair == nil {
		return 0
	}
	return max(cfg.ScrubRepos, 0)
}
