package reclaimer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/gc"
	"github.com/reclaim-registry/reclaim/gc/collector"
	"github.com/reclaim-registry/reclaim/internal/pause"
	"github.com/reclaim-registry/reclaim/reclaim"
	"golang.org/x/sync/errgroup"
)

// Defaults of the reclaimer.
const (
	DefaultInterval = time.Minute
	DefaultBatch    = 100
	defaultWorkers  = 4
)

// Queue is the review queue the reclaimer consumes.
type Queue interface {
	// Claim takes up to n due items and holds them for lease: nobody else
	// claims them until it runs out.
	Claim(ctx context.Context, n int, lease time.Duration) ([]reclaim.ReviewItem, error)
	// Done removes reviewed items (each unless it was queued again
	// meanwhile); a tick settles its batch's in one call.
	Done(ctx context.Context, items ...reclaim.ReviewItem) error
	// Requeue makes an item due again at due.
	Requeue(ctx context.Context, it reclaim.ReviewItem, due time.Time) error
	// Len is the number of queued items and of those due now.
	Len(ctx context.Context) (total, due int64, err error)
}

// Config wires a Reclaimer. Collector and Queue are required; every other
// capability is optional and nil turns off what needs it.
type Config struct {
	// Collector checks the preconditions of a tick and deletes a blob as
	// a collection deletes one whose last link it removed
	// (Collector.Orphans); it also refreshes usage estimates
	// (Collector.RefreshUsage). Its window W is the reclaimer's.
	Collector *collector.Collector
	// Queue is the review queue the reclaimer consumes.
	Queue Queue
	// Driver is the storage driver the collector deletes through: the
	// scrub and the usage walk list the catalog and links with it. Nil:
	// neither walks.
	Driver storagedriver.StorageDriver
	// Context, when set, derives the context of a tick's storage and
	// tracker calls (the collector's Config.Context).
	Context func(context.Context) context.Context
	// Freed is where ticks add what they deleted to the daily sums. Nil:
	// no sums are kept.
	Freed collector.FreedCounter
	// Usage is where the usage refresh finds what to refresh (the store
	// the collector writes estimates to). Nil: no refresh (usage.go).
	Usage UsageStore
	// Repair writes back the reverse links the scrub finds missing, and
	// MarkLinkDBIncomplete removes the completeness marker when it could
	// not. Without Repair or ScrubCursor there is no scrub (scrub.go).
	Repair               collector.LinkRepairer
	MarkLinkDBIncomplete func(ctx context.Context) error
	ScrubCursor          ScrubCursor
	// Deletions is optional: it hears, once per tick and after its
	// reviews, the blobs the tick deleted (the deletion events). Nil: nobody.
	Deletions reclaim.DeletionSink
	// Now is the clock the usage refresh ages estimates by; default
	// time.Now.
	Now func() time.Time

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
	// estimate is refreshed (default 1h).
	UsageRefresh int
	UsageMaxAge  time.Duration
	// ScrubRepos is how many repositories a tick scrubs for missing
	// reverse links (default 2; < 0: none), walking the catalog from
	// ScrubCursor.
	ScrubRepos int
	// Trash, when set, is the trash whose expired entries a tick purges
	// after its reviews, at most PurgeBatch (default 100) oldest first;
	// the purge deletes a blob's data through the tick's own checks.
	Trash      TrashPurger
	PurgeBatch int
	// Logf logs tick failures; nil discards them.
	Logf func(format string, args ...any)
	// Observe, when set, sees every decision and every tick (metrics).
	Observe func(TickReport)
}

// Reclaimer reviews queued blobs in the background.
type Reclaimer struct {
	c   *collector.Collector
	q   Queue
	cfg Config

	mu       sync.Mutex
	st       Status
	failures int
	busy     time.Duration // time spent in ticks, for the rate
}

// New validates cfg, fills in defaults and returns a Reclaimer deleting
// through cfg.Collector.
func New(cfg Config) (*Reclaimer, error) {
	if cfg.Collector == nil || cfg.Queue == nil {
		return nil, errors.New("gc: reclaimer.New needs a Collector and a Queue")
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Batch == 0 {
		cfg.Batch = DefaultBatch
	}
	if cfg.Workers == 0 {
		cfg.Workers = defaultWorkers
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
	if cfg.Context == nil {
		cfg.Context = func(ctx context.Context) context.Context { return ctx }
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	r := &Reclaimer{c: cfg.Collector, q: cfg.Queue, cfg: cfg}
	r.st = Status{Enabled: cfg.Enabled, IntervalSecs: cfg.Interval.Seconds(), Batch: cfg.Batch,
		WindowSecs: int64(r.c.Window() / time.Second), ScrubRepos: scrubBudget(cfg), DeletedBy: map[string]int64{}, KeptBy: map[string]int64{}}
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
	for pause.For(ctx, wait) == nil {
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
		rep.Err = collector.ErrDisabled
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
	r.countFreed(ctx, freed, deleted) // before the status says so
	r.record(rep)
	if r.cfg.Observe != nil {
		r.cfg.Observe(rep)
	}
	return rep
}

func (r *Reclaimer) tick(ctx context.Context, rep *TickReport) {
	ctx = r.cfg.Context(ctx)
	del, err := r.c.Orphans(ctx)
	if err != nil {
		var ae *collector.AbortError
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
	errs := make([][]gc.Decision, len(items))
	done := make([]bool, len(items))
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
			decs[i], done[i], errs[i] = r.review(gctx, del, it)
			return nil
		})
	}
	_ = g.Wait()
	freed := r.purge(ctx, del, rep)
	r.announce(ctx, append(slices.Clip(decs), freed...)) // a purge's data delete is told too
	r.settleDone(ctx, items, done, errs)
	failed := 0
	for i, d := range decs {
		if d.Reason == reclaim.ReasonCheckFailed || d.Reason == reclaim.ReasonDeleteFailed {
			failed++
		}
		for _, e := range errs[i] {
			r.cfg.Logf("reclaimer: %s %s: %s", e.Reason, e.Digest, e.Detail)
		}
	}
	rep.Decisions = append(decs, freed...)
	if failed > 0 {
		rep.Err = fmt.Errorf("%d of %d reviews failed (first: %s)", failed, len(decs), firstFailure(decs))
		// one blip is not worth a backoff; a batch that failed entirely is
		rep.Failed = failed == len(decs)
	}
}

// settleDone removes the items a tick's reviews are done with from the
// queue, in one call: one Redis round trip per batch instead of one per
// item. An item it fails to remove is left claimed and comes back after
// its lease, to be found gone or linked.
func (r *Reclaimer) settleDone(ctx context.Context, items []reclaim.ReviewItem, done []bool, errs [][]gc.Decision) {
	var ack []reclaim.ReviewItem
	for i, it := range items {
		if done[i] {
			ack = append(ack, it)
		}
	}
	err := r.q.Done(ctx, ack...)
	if err == nil {
		return
	}
	for i, it := range items {
		if done[i] {
			errs[i] = append(errs[i], gc.Decision{Kind: reclaim.KindBlob, Digest: it.Blob, Reason: reclaim.ReasonCheckFailed,
				Detail: fmt.Sprintf("settle queue item: %v", err)})
		}
	}
}

// review decides one item with the collection's blob step and settles it
// in the queue, but for Done, which it leaves to the tick (done).
func (r *Reclaimer) review(ctx context.Context, del *collector.Orphans, it reclaim.ReviewItem) (dec gc.Decision, done bool, errs []gc.Decision) {
	dec, errs = del.Delete(ctx, it.Blob)
	now, window := del.Now(), r.c.Window()
	var qerr error
	switch dec.Reason {
	case reclaim.ReasonUnreferenced, reclaim.ReasonAlreadyGone, reclaim.ReasonLinkedElsewhere, reclaim.ReasonStillLinked, reclaim.ReasonInTrash:
		// Deleted, or linked: a later unlink queues it again. Held in
		// the trash: its purge deletes the data, not the queue.
		done = true
	case reclaim.ReasonRecentlyAccessed:
		due := now.Add(window)
		if dec.LastAccess != nil {
			due = dec.LastAccess.Add(window)
		}
		// The fence may have seen an access newer than the one read
		// before it: never re-claim before the next interval.
		due = maxTime(due, now.Add(r.cfg.Interval))
		qerr = r.q.Requeue(ctx, it, due)
	case reclaim.ReasonFenced:
		// Someone else is deleting it right now; look again soon.
		qerr = r.q.Requeue(ctx, it, now.Add(r.cfg.Interval))
	default:
		// ReasonCheckFailed, ReasonDeleteFailed: left claimed, it comes back after the
		// lease, which is the backoff for one bad blob.
	}
	if qerr != nil {
		errs = append(errs, gc.Decision{Kind: reclaim.KindBlob, Digest: it.Blob, Reason: reclaim.ReasonCheckFailed,
			Detail: fmt.Sprintf("settle queue item: %v", qerr)})
	}
	return dec, done, errs
}

// Review runs the deletion step on one blob now, outside the queue (the
// slow-path `registry gc sweep` uses it). The preconditions of a tick apply.
func (r *Reclaimer) Review(ctx context.Context, blob digest.Digest) (gc.Decision, error) {
	if !r.cfg.Enabled {
		return gc.Decision{}, collector.ErrDisabled
	}
	ctx = r.cfg.Context(ctx)
	del, err := r.c.Orphans(ctx)
	if err != nil {
		return gc.Decision{}, err
	}
	dec, errs := del.Delete(ctx, blob)
	if len(errs) > 0 {
		return dec, fmt.Errorf("%s", errs[0].Detail)
	}
	return dec, nil
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// scrubBudget is the repositories a tick scrubs: none without a cursor,
// a way to write reverse links or a driver to list them with.
func scrubBudget(cfg Config) int {
	if cfg.ScrubCursor == nil || cfg.Repair == nil || cfg.Driver == nil {
		return 0
	}
	return max(cfg.ScrubRepos, 0)
}

// countFreed adds what a tick deleted to the daily sums.
func (r *Reclaimer) countFreed(ctx context.Context, bytes int64, objects int) {
	if r.cfg.Freed == nil || objects == 0 {
		return
	}
	_ = r.cfg.Freed.CountFreed(context.WithoutCancel(ctx), r.cfg.Now(), bytes, objects)
}

// TrashPurger purges up to max expired trash entries at now, deleting a
// blob's data only through orphans' checks (Orphans.Purge), and returns
// the decisions on the blobs whose data it freed and how many entries it
// purged (the registry wires trash.Bin.PurgeExpired).
type TrashPurger func(ctx context.Context, orphans *collector.Orphans, now time.Time, max int) (freed []gc.Decision, purged int, err error)

// purge removes expired trash entries and returns the decisions on the
// blobs whose data it freed: deletions of the tick, told like its own.
func (r *Reclaimer) purge(ctx context.Context, del *collector.Orphans, rep *TickReport) []gc.Decision {
	if r.cfg.Trash == nil {
		return nil
	}
	batch := r.cfg.PurgeBatch
	if batch <= 0 {
		batch = 100
	}
	freed, purged, err := r.cfg.Trash(ctx, del, del.Now(), batch)
	if err != nil {
		r.cfg.Logf("reclaimer: trash purge: %v", err)
	}
	rep.Purged = purged
	return freed
}
