package gc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/distribution/reference"
)

// Defaults, chosen to be safe on a registry nobody has tuned.
const (
	DefaultWindow     = 24 * time.Hour
	DefaultCap        = 10000
	DefaultFenceLease = 2 * time.Minute
	// DefaultLockLease is short because the tracker renews the lock while
	// the run lives: a crashed run blocks its repository for at most this.
	DefaultLockLease = time.Minute
	DefaultPlanTTL   = time.Hour
	DefaultRunTTL    = 24 * time.Hour
	maxStoredRuns    = 1000
)

// Config wires a Collector to storage and the tracker.
type Config struct {
	// Driver is the storage driver wrapped by the reclaim middleware, so
	// that deleting a forward link also removes its reverse link.
	Driver  storagedriver.StorageDriver
	Tracker Tracker
	Links   LinkIndex
	// LinkDBComplete reports whether the reverse-link database is
	// complete. Nil means "not known to be complete": no blob is deleted.
	LinkDBComplete CompletenessFunc
	Pinner         Pinner  // optional
	Evictor        Evictor // optional; the reclaim middleware evicts on delete already
	// Context, when set, derives the context of every run's storage and
	// tracker calls; the registry passes storage.WithoutAccessRecords so
	// the run's own reads do not count as access.
	Context func(context.Context) context.Context

	Window       time.Duration // protection window W; default 24h
	Cap          int           // max link deletions per run; 0 = DefaultCap, <0 = none
	KeepUntagged bool          // policy: keep every untagged manifest
	FenceLease   time.Duration
	LockLease    time.Duration
	PlanTTL      time.Duration
	Now          func() time.Time
}

// Collector collects one repository at a time. It is safe for concurrent
// use; runs on one repository exclude each other through the tracker's
// repository lock, on every instance.
type Collector struct {
	cfg     Config
	clock   leaseClock // times fence renewals during deletes
	driver  storagedriver.StorageDriver
	tracker Tracker
	links   LinkIndex
	pinner  Pinner
	evictor Evictor

	mu    sync.Mutex
	plans map[string]*Plan
	runs  map[string]*storedRun
}

type storedRun struct {
	report  *Report
	expires time.Time
}

// New validates cfg, fills in defaults and returns a Collector.
func New(cfg Config) (*Collector, error) {
	if cfg.Driver == nil || cfg.Tracker == nil || cfg.Links == nil {
		return nil, errors.New("gc: Driver, Tracker and Links are required")
	}
	if cfg.Window == 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.Window < 0 {
		return nil, fmt.Errorf("gc: window %s must be positive", cfg.Window)
	}
	switch {
	case cfg.Cap == 0:
		cfg.Cap = DefaultCap
	case cfg.Cap < 0:
		cfg.Cap = 0
	}
	if cfg.FenceLease <= 0 {
		cfg.FenceLease = DefaultFenceLease
	}
	if cfg.LockLease <= 0 {
		cfg.LockLease = DefaultLockLease
	}
	if cfg.PlanTTL <= 0 {
		cfg.PlanTTL = DefaultPlanTTL
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Collector{
		cfg: cfg, clock: realClock{}, driver: cfg.Driver, tracker: cfg.Tracker, links: cfg.Links,
		pinner: cfg.Pinner, evictor: cfg.Evictor,
		plans: map[string]*Plan{}, runs: map[string]*storedRun{},
	}, nil
}

// Window is the protection window the collector uses.
func (c *Collector) Window() time.Duration { return c.cfg.Window }

// RunOptions adjust one run.
type RunOptions struct {
	// DryRun plans and reports without taking the lock or changing anything.
	DryRun bool
	// KeepUntagged overrides the configured policy when set.
	KeepUntagged *bool
	// Cap lowers the configured cap for this run when > 0.
	Cap int
	// PlanID applies a plan made by Preview: only what it lists is deleted.
	PlanID string
}

// ValidateName checks a repository name against the reference grammar.
func ValidateName(repo string) error {
	n, err := reference.WithName(repo)
	if err != nil || n.Name() != repo {
		return fmt.Errorf("%w: %q", ErrInvalidName, repo)
	}
	return nil
}

// Collect runs one collection of repo and returns its report. A failed
// precondition returns an *AbortError (errors.Is ErrAborted) and a report
// with status "aborted"; nothing was deleted.
func (c *Collector) Collect(ctx context.Context, repo string, o RunOptions) (*Report, error) {
	r, err := c.begin(ctx, repo, o)
	if err != nil {
		return nil, err
	}
	return r.finish(ctx)
}

// Start begins a collection in the background and returns its run id. The
// lock is taken before Start returns, so a busy repository fails here.
func (c *Collector) Start(ctx context.Context, repo string, o RunOptions) (string, error) {
	r, err := c.begin(ctx, repo, o)
	if err != nil {
		return "", err
	}
	go r.finish(context.WithoutCancel(ctx)) //nolint:errcheck // the stored report carries the outcome
	return r.rep.RunID, nil
}

// Preview plans a collection, stores the plan and returns it with the
// dry-run report that describes it.
func (c *Collector) Preview(ctx context.Context, repo string, o RunOptions) (*Plan, *Report, error) {
	o.DryRun, o.PlanID = true, ""
	rep, err := c.Collect(ctx, repo, o)
	if err != nil {
		return nil, rep, err
	}
	now := c.cfg.Now()
	p := &Plan{ID: newID(), Repository: repo, CreatedAt: now, ExpiresAt: now.Add(c.cfg.PlanTTL),
		Manifests: rep.ManifestsDeleted, Layers: rep.LayersUnlinked, Blobs: rep.BlobsDeleted}
	p.index()
	rep.PlanID = p.ID
	c.mu.Lock()
	c.gcLocked(now)
	c.plans[p.ID] = p
	c.mu.Unlock()
	return p, rep, nil
}

// Plan returns a stored plan.
func (c *Collector) Plan(id string) (*Plan, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gcLocked(c.cfg.Now())
	p, ok := c.plans[id]
	return p, ok
}

// Run returns a recent run's report (status "running" while it runs).
func (c *Collector) Run(id string) (*Report, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gcLocked(c.cfg.Now())
	r, ok := c.runs[id]
	if !ok {
		return nil, false
	}
	return r.report, true
}

func (c *Collector) gcLocked(now time.Time) {
	for id, p := range c.plans {
		if now.After(p.ExpiresAt) {
			delete(c.plans, id)
		}
	}
	for id, r := range c.runs {
		if now.After(r.expires) || len(c.runs) > maxStoredRuns && r.report.Status != StatusRunning {
			delete(c.runs, id)
		}
	}
}

func (c *Collector) store(rep *Report) {
	cp := *rep // the stored copy is never mutated again
	c.mu.Lock()
	c.gcLocked(c.cfg.Now())
	c.runs[rep.RunID] = &storedRun{report: &cp, expires: c.cfg.Now().Add(DefaultRunTTL)}
	c.mu.Unlock()
}

// run is one collection between begin and finish.
type run struct {
	c      *Collector
	rs     *runState
	rep    *Report
	unlock func()
	held   context.Context // ends when the repository lock is lost; nil in a dry run
	start  time.Time
}

// begin validates the request and takes the repository lock: everything
// that can be answered before the work starts.
func (c *Collector) begin(ctx context.Context, repo string, o RunOptions) (*run, error) {
	if c.cfg.Context != nil {
		ctx = c.cfg.Context(ctx)
	}
	if err := ValidateName(repo); err != nil {
		return nil, err
	}
	rs := &runState{c: c, repo: repo, window: c.cfg.Window, cap: c.cfg.Cap, keepUntag: c.cfg.KeepUntagged}
	if o.KeepUntagged != nil {
		rs.keepUntag = *o.KeepUntagged
	}
	if o.Cap > 0 && (rs.cap == 0 || o.Cap < rs.cap) {
		rs.cap = o.Cap
	}
	if o.PlanID != "" {
		p, ok := c.Plan(o.PlanID)
		if !ok {
			return nil, fmt.Errorf("%w: %s", ErrPlanNotFound, o.PlanID)
		}
		if p.Repository != repo {
			return nil, fmt.Errorf("%w: plan %s is for %s", ErrPlanRepository, o.PlanID, p.Repository)
		}
		rs.restrict = p
	}
	r := &run{c: c, rs: rs, start: c.cfg.Now(), unlock: func() {}}
	r.rep = newReport(newID(), repo, o.DryRun, rs.window, r.start)
	r.rep.PlanID = o.PlanID
	if !o.DryRun {
		// A dry run changes nothing, so it needs no lock. The lock lives as
		// long as the run, not as the request that started it.
		held, unlock, err := c.tracker.LockRepository(context.WithoutCancel(ctx), repo, c.cfg.LockLease)
		if err != nil {
			if errors.Is(err, ErrRepositoryBusy) {
				return nil, err
			}
			return nil, r.abort(abort(AbortRedisUnavailable, err))
		}
		r.unlock, r.held = unlock, held
	}
	c.store(r.rep)
	return r, nil
}

func (r *run) abort(err error) error {
	var ae *AbortError
	if errors.As(err, &ae) {
		r.rep.Status, r.rep.Abort = StatusAborted, string(ae.Reason)
	} else {
		r.rep.Status = StatusFailed
	}
	r.rep.Errors = append(r.rep.Errors, Decision{Kind: KindRun, Reason: CheckFailed, Detail: err.Error()})
	r.rep.FinishedAt = r.c.cfg.Now()
	r.rep.Timings.TotalMS = r.rep.FinishedAt.Sub(r.start).Milliseconds()
	r.c.store(r.rep)
	return err
}

func (r *run) finish(ctx context.Context) (*Report, error) {
	defer r.unlock()
	if r.c.cfg.Context != nil {
		ctx = r.c.cfg.Context(ctx)
	}
	if r.held != nil {
		// A run that lost its lock stops: another run may hold it now.
		var stop context.CancelCauseFunc
		ctx, stop = context.WithCancelCause(ctx)
		defer stop(nil)
		defer context.AfterFunc(r.held, func() {
			stop(fmt.Errorf("%w: %w", ErrLockLost, context.Cause(r.held)))
		})()
	}
	c, rs, rep := r.c, r.rs, r.rep

	// Preconditions: fail closed, nothing deleted.
	since, err := c.tracker.RecordingSince(ctx)
	switch {
	case errors.Is(err, ErrRedisEvicts):
		return rep, r.abort(abort(AbortRedisEvicts, err))
	case errors.Is(err, ErrNotRecording):
		return rep, r.abort(abort(AbortRedisUntrusted, err))
	case err != nil:
		return rep, r.abort(abort(AbortRedisUnavailable, err))
	}
	now := c.cfg.Now()
	if clk, ok := c.tracker.(Clock); ok {
		if now, err = clk.Now(ctx); err != nil {
			return rep, r.abort(abort(AbortRedisUnavailable, err))
		}
	}
	rs.now = now
	if now.Sub(since) < rs.window {
		return rep, r.abort(abort(AbortRedisRecordingTooShort,
			fmt.Errorf("recording since %s, less than the window %s", since.UTC().Format(time.RFC3339), rs.window)))
	}
	rs.linkdbOK, rs.linkdbNote = false, "no completeness check configured"
	if c.cfg.LinkDBComplete != nil {
		ok, err := c.cfg.LinkDBComplete(ctx)
		switch {
		case err != nil:
			rs.linkdbNote = fmt.Sprintf("completeness marker unreadable: %v", err)
		case !ok:
			rs.linkdbNote = "run `registry linkdb rebuild` to complete it"
		default:
			rs.linkdbOK, rs.linkdbNote = true, ""
		}
	}

	t0 := c.cfg.Now()
	s, err := takeSnapshot(ctx, c.driver, rs.repo)
	if err != nil {
		if errors.Is(err, ErrRepositoryNotFound) {
			r.abort(err) //nolint:errcheck
			return nil, err
		}
		return rep, r.abort(lockLost(ctx, err))
	}
	t1 := c.cfg.Now()
	p, err := rs.plan(ctx, s)
	if err != nil {
		return rep, r.abort(lockLost(ctx, err))
	}
	t2 := c.cfg.Now()
	if rep.DryRun {
		for _, d := range p.decisions {
			rep.add(d)
		}
	} else {
		rs.sweep(ctx, p, rep)
		if err := context.Cause(ctx); errors.Is(err, ErrLockLost) {
			// What was deleted before the loss is in the report; every
			// object after it was kept (its fence or delete failed).
			return rep, r.abort(err)
		}
	}
	t3 := c.cfg.Now()
	if rs.restrict != nil {
		for _, d := range rep.decisions {
			if !d.Deleted() && rs.restrict.has(d.Kind, d.Digest) {
				rep.Changed = append(rep.Changed, d)
			}
		}
	}
	rep.Status = StatusDone
	rep.FinishedAt = t3
	rep.Timings = Timings{SnapshotMS: t1.Sub(t0).Milliseconds(), PlanMS: t2.Sub(t1).Milliseconds(),
		SweepMS: t3.Sub(t2).Milliseconds(), TotalMS: t3.Sub(r.start).Milliseconds()}
	c.store(rep)
	return rep, nil
}

// lockLost returns the lost lock instead of err when that is why err
// happened.
func lockLost(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); errors.Is(cause, ErrLockLost) {
		return fmt.Errorf("%w (%v)", cause, err)
	}
	return err
}

func newID() string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return hex.EncodeToString(b[:])
}
