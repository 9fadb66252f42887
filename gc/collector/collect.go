package collector

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/reclaim-registry/reclaim/gc"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/reclaim/gcrun"
)

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

	// unlisted: a dry run nobody asked for (the reclaimer's usage
	// refresh), kept out of Run and Runs.
	unlisted bool
}

// Collect runs one collection of repo and returns its report. A failed
// precondition returns an *AbortError (errors.Is ErrAborted) and a report
// with status "aborted"; nothing was deleted.
//
// A dry run is bounded and shared with identical ones running (dryruns.go):
// its report may be another caller's too, and must not be changed.
func (c *Collector) Collect(ctx context.Context, repo string, o RunOptions) (*Report, error) {
	if o.DryRun && !o.unlisted {
		return c.dryRun(ctx, repo, o)
	}
	r, err := c.begin(ctx, repo, o)
	if err != nil {
		return nil, err
	}
	return r.finish(ctx)
}

// Start begins a collection in the background and returns its run id. The
// lock is taken before Start returns, so a busy repository fails here. done,
// when not nil, is called with the outcome once the run has finished (the
// stored report carries it too).
func (c *Collector) Start(ctx context.Context, repo string, o RunOptions, done func(*Report, error)) (string, error) {
	r, err := c.begin(ctx, repo, o)
	if err != nil {
		return "", err
	}
	go func() {
		rep, err := r.finish(context.WithoutCancel(ctx))
		if done != nil {
			done(rep, err)
		}
	}()
	return r.rep.RunID, nil
}

// Preview plans a collection, stores the plan and returns it with the
// dry-run report that describes it.
func (c *Collector) Preview(ctx context.Context, repo string, o RunOptions) (*Plan, *Report, error) {
	o.DryRun, o.PlanID = true, ""
	shared, err := c.Collect(ctx, repo, o)
	if err != nil {
		return nil, shared, err
	}
	rep := new(Report)
	*rep = *shared // another identical dry run may have the same report
	now := c.cfg.Now()
	p := &Plan{ID: newID(), Repository: repo, CreatedAt: now, ExpiresAt: now.Add(c.cfg.PlanTTL),
		Manifests: rep.ManifestsDeleted, Layers: rep.LayersUnlinked, Blobs: rep.BlobsDeleted}
	p.index()
	rep.PlanID = p.ID
	c.storePlan(p)
	return p, rep, nil
}

// run is one collection between begin and finish.
type run struct {
	c      *Collector
	pol    policy
	rep    *Report
	unlock func()
	held   context.Context // ends when the repository lock is lost; nil in a dry run
	start  time.Time
	log    *runLog // the run's shared record; nil without one
	// configured: the run decides by the configured policy (no options
	// of its own, no plan), so its plan is the repository's usage.
	configured bool
	unlisted   bool
	usage      reclaim.Usage // what recordUsage wrote
	usageErr   error
}

// begin validates the request and takes the repository lock: everything
// that can be answered before the work starts.
func (c *Collector) begin(ctx context.Context, repo string, o RunOptions) (*run, error) {
	ctx = c.runContext(ctx)
	if err := ValidateName(repo); err != nil {
		return nil, err
	}
	pol := policy{Policy: gc.Policy{Repo: repo, Window: c.cfg.Window, Cap: c.cfg.Cap, KeepUntagged: c.cfg.KeepUntagged, Trash: c.cfg.Trash != nil}, dryRun: o.DryRun}
	if o.KeepUntagged != nil {
		pol.KeepUntagged = *o.KeepUntagged
	}
	if o.Cap > 0 && (pol.Cap == 0 || o.Cap < pol.Cap) {
		pol.Cap = o.Cap
	}
	if o.PlanID != "" {
		p, ok := c.Plan(o.PlanID)
		if !ok {
			return nil, fmt.Errorf("%w: %s", ErrPlanNotInMemory, o.PlanID)
		}
		if p.Repository != repo {
			return nil, fmt.Errorf("%w: plan %s is for %s", ErrPlanRepository, o.PlanID, p.Repository)
		}
		pol.applying(p)
	}
	r := &run{c: c, pol: pol, start: c.cfg.Now(), unlock: func() {},
		configured: o.PlanID == "" && pol.KeepUntagged == c.cfg.KeepUntagged && pol.Cap == c.cfg.Cap,
		unlisted:   o.unlisted && o.DryRun}
	r.rep = newReport(newID(), repo, o.DryRun, pol.Window, r.start)
	r.rep.PlanID = o.PlanID
	if !o.DryRun {
		// A dry run changes nothing, so it needs no lock. The lock lives as
		// long as the run, not as the request that started it.
		if err := r.lock(ctx); err != nil {
			if errors.Is(err, reclaim.ErrRepositoryBusy) {
				return nil, err
			}
			return nil, r.abort(abort(reclaim.AbortRedisUnavailable, err))
		}
	}
	r.remember()
	return r, nil
}

// remember stores the report where Run and Runs find it, unless the run
// is unlisted.
func (r *run) remember() {
	if !r.unlisted {
		r.c.store(r.rep)
	}
}

// lock takes the repository lock, with the run's record when the tracker
// keeps them.
func (r *run) lock(ctx context.Context) error {
	c := r.c
	if c.recorder == nil {
		held, unlock, err := c.tracker.LockRepository(context.WithoutCancel(ctx), r.pol.Repo, c.cfg.LockLease)
		if err != nil {
			return err
		}
		r.unlock, r.held = unlock, held
		return nil
	}
	h, err := c.recorder.BeginRun(context.WithoutCancel(ctx), r.pol.Repo, r.rep.RunID, r.start, c.cfg.LockLease)
	if err != nil {
		return err
	}
	r.unlock, r.held, r.log = h.Unlock, h.Held(), &runLog{h: h, r: r}
	r.rep.Step = gcrun.StepSnapshot
	return nil
}

func (r *run) abort(err error) error {
	var ae *AbortError
	if errors.As(err, &ae) {
		r.rep.Status, r.rep.Abort = gcrun.StatusAborted, ae.Reason.String()
	} else {
		r.rep.Status = gcrun.StatusFailed
	}
	r.rep.Errors = append(r.rep.Errors, gc.Decision{Kind: reclaim.KindRun, Reason: reclaim.ReasonCheckFailed, Detail: err.Error()})
	r.rep.FinishedAt = r.c.cfg.Now()
	r.rep.Timings.TotalMS = r.rep.FinishedAt.Sub(r.start).Milliseconds()
	r.log.end(context.Background())
	r.remember()
	return err
}

// finish checks the preconditions, then takes the snapshot, gathers the
// facts, decides and, unless this is a dry run, deletes (the delete phase). A dry run goes on
// past a blocker (Redis recording for less than the window, say) and lists
// it in the report; a real run aborts.
func (r *run) finish(ctx context.Context) (*Report, error) {
	defer r.unlock()
	ctx, stop := r.underLock(r.c.runContext(ctx))
	defer stop()
	r.reconcile(ctx)
	tr, err := r.c.assess(ctx)
	if err == nil && !r.rep.DryRun {
		err = tr.refusal()
	}
	if err != nil {
		return r.rep, r.abort(err)
	}
	r.rep.Blockers = append(r.rep.Blockers, tr.blockers...)
	r.pol.Now, r.pol.LinkDBComplete, r.pol.LinkDBNote = tr.now, tr.linkdbOK, tr.linkdbNote
	r.pol.Pins = r.c.pinner != nil

	t0 := r.c.cfg.Now()
	s, err := takeSnapshot(ctx, r.c.driver, r.pol.Repo)
	if err != nil {
		if errors.Is(err, ErrRepositoryNotFound) {
			r.abort(err) //nolint:errcheck
			return nil, err
		}
		return r.rep, r.abort(lockLost(ctx, err))
	}
	t1 := r.c.cfg.Now()
	r.log.step(ctx, gcrun.StepPlan)
	f := r.c.gather(ctx, s, r.pol)
	r.repaired(f)
	p := gc.Decide(s, f.Facts, r.pol.Policy)
	t2 := r.c.cfg.Now()
	if r.rep.DryRun {
		for _, d := range p.Decisions {
			r.rep.add(d)
		}
	} else {
		(&deleter{c: r.c, pol: r.pol, log: r.log, by: "gc", runID: r.rep.RunID, planned: r.pol.Now}).deletePhase(ctx, s, p, r.rep)
		r.announce(ctx, s)
		r.c.countFreed(ctx, r.rep.BytesFreed, len(r.rep.ManifestsDeleted)+len(r.rep.LayersUnlinked)+len(r.rep.BlobsDeleted))
		if err := context.Cause(ctx); errors.Is(err, reclaim.ErrLockLost) {
			// What was deleted before the loss is in the report; every
			// object after it was kept (its fence or delete failed).
			return r.rep, r.abort(err)
		}
	}
	r.done(t0, t1, t2)
	r.recordUsage(ctx)
	return r.rep, nil
}

// underLock returns ctx cancelled (with ErrLockLost) as soon as the
// repository lock is lost: a run that lost its lock stops, another run may
// hold it now.
func (r *run) underLock(ctx context.Context) (context.Context, func()) {
	if r.held == nil {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	stopWatch := context.AfterFunc(r.held, func() {
		cancel(fmt.Errorf("%w: %w", reclaim.ErrLockLost, context.Cause(r.held)))
	})
	return ctx, func() { stopWatch(); cancel(nil) }
}

// done completes and stores the report of a run that finished; t0, t1, t2
// are when the snapshot, the plan and the delete phase began.
func (r *run) done(t0, t1, t2 time.Time) {
	rep, t3 := r.rep, r.c.cfg.Now()
	if r.pol.restrict != nil {
		for _, d := range rep.decisions {
			if !d.Deleted() && r.pol.restrict.has(d.Kind, d.Digest) {
				rep.Changed = append(rep.Changed, d)
			}
		}
	}
	rep.Status = gcrun.StatusDone
	rep.FinishedAt = t3
	if r.c.cfg.Trash != nil && !rep.DryRun && len(rep.BlobsInTrash)+len(rep.ManifestsDeleted)+len(rep.LayersUnlinked) > 0 {
		// every hold was written after the start: restorable at least until
		until := rep.StartedAt.Add(r.c.cfg.Trash.Keep()).UTC()
		rep.RestorableUntil = &until
	}
	rep.Timings = Timings{SnapshotMS: t1.Sub(t0).Milliseconds(), PlanMS: t2.Sub(t1).Milliseconds(),
		SweepMS: t3.Sub(t2).Milliseconds(), TotalMS: t3.Sub(r.start).Milliseconds()}
	r.log.end(context.Background())
	r.remember()
}

// lockLost returns the lost lock instead of err when that is why err
// happened.
func lockLost(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); errors.Is(cause, reclaim.ErrLockLost) {
		return fmt.Errorf("%w (%v)", cause, err)
	}
	return err
}
