package collector

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// Dry runs take no lock, so nothing bounded them: 40 at once on a
// 1,000-tag repository took a manifest HEAD from 0.03 s to over a second.
// Two rules bound them per instance:
//
//   - Identical dry runs at once share one walk: same repository, same
//     effective policy (untagged, cap) and plan. The first starts it; the
//     others, arriving while it runs, get its report (the same run id).
//     A caller that gives up stops waiting, not the walk. (What
//     golang.org/x/sync/singleflight does, with a hook once a caller is
//     registered, so tests can force the interleaving.)
//   - At most Config.DryRuns walks run at once (default 4).
//     One more waits up to Config.DryRunWait for a walk to end, then
//     fails with ErrTooManyDryRuns (the API's 429).
//
// Real runs are not counted: one per repository across all instances
// (the repository lock) bounds them. Neither are the reclaimer's usage
// refreshes, which it makes one at a time.
const (
	defaultDryRuns    = 4
	defaultDryRunWait = 5 * time.Second
)

// DryRunHooks let tests see dry runs being shared and bounded, to force
// an interleaving without sleeps. Nil fields are not called.
type DryRunHooks struct {
	// Joined: a dry run of repo started a walk (first) or joined one
	// running; called once it is registered, so an identical dry run from
	// now on joins the same walk.
	Joined func(repo string, first bool)
	// Waiting: a walk of repo waits for a slot.
	Waiting func(repo string)
	// Walking: a walk of repo has its slot and starts.
	Walking func(repo string)
}

// SetDryRunHooks installs h: for tests only, before any dry run.
func (c *Collector) SetDryRunHooks(h DryRunHooks) { c.dry.hooks = h }

// dryRuns is the bound and the coalescing of a collector's dry runs.
type dryRuns struct {
	slots chan struct{}
	wait  time.Duration
	hooks DryRunHooks

	mu      sync.Mutex
	walking map[string]*sharedWalk // by dryRunKey
}

// sharedWalk is one dry run walk and everyone waiting for its report.
type sharedWalk struct {
	done chan struct{} // closed when rep and err are set
	rep  *Report
	err  error
}

func (h DryRunHooks) call(f func(string), repo string) {
	if f != nil {
		f(repo)
	}
}

func newDryRuns(n int, wait time.Duration) *dryRuns {
	return &dryRuns{slots: make(chan struct{}, n), wait: wait, walking: map[string]*sharedWalk{}}
}

// acquire takes a slot, waiting up to d.wait for one, and returns what
// gives it back.
func (d *dryRuns) acquire(ctx context.Context, repo string) (release func(), err error) {
	release = func() { <-d.slots }
	select {
	case d.slots <- struct{}{}:
		return release, nil
	default:
	}
	d.hooks.call(d.hooks.Waiting, repo)
	t := time.NewTimer(d.wait)
	defer t.Stop()
	select {
	case d.slots <- struct{}{}:
		return release, nil
	case <-t.C:
		return nil, fmt.Errorf("%w: %d are running, none ended within %s", ErrTooManyDryRuns, cap(d.slots), d.wait)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// dryRun runs the dry run o of repo, or joins an identical one running.
func (c *Collector) dryRun(ctx context.Context, repo string, o RunOptions) (*Report, error) {
	keep := c.cfg.KeepUntagged
	if o.KeepUntagged != nil {
		keep = *o.KeepUntagged
	}
	limit := c.cfg.Cap
	if o.Cap > 0 && (limit == 0 || o.Cap < limit) {
		limit = o.Cap
	}
	key := repo + "\x00" + strconv.FormatBool(keep) + "\x00" + strconv.Itoa(limit) + "\x00" + o.PlanID
	d := c.dry
	d.mu.Lock()
	w, joined := d.walking[key]
	if !joined {
		w = &sharedWalk{done: make(chan struct{})}
		d.walking[key] = w
	}
	d.mu.Unlock()
	if d.hooks.Joined != nil {
		d.hooks.Joined(repo, !joined)
	}
	if !joined {
		// The walk outlives a caller that leaves: others may wait for it.
		go func() {
			w.rep, w.err = c.walk(context.WithoutCancel(ctx), repo, o)
			d.mu.Lock()
			delete(d.walking, key)
			d.mu.Unlock()
			close(w.done)
		}()
	}
	select {
	case <-w.done:
		return w.rep, w.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// walk is one dry run, under the bound.
func (c *Collector) walk(ctx context.Context, repo string, o RunOptions) (rep *Report, err error) {
	err = c.bounded(ctx, repo, func() error {
		r, err := c.begin(ctx, repo, o)
		if err != nil {
			return err
		}
		rep, err = r.finish(ctx)
		return err
	})
	return rep, err
}

// bounded runs a dry run that is not shared (a usage refresh) under the
// bound.
func (c *Collector) bounded(ctx context.Context, repo string, f func() error) error {
	release, err := c.dry.acquire(ctx, repo)
	if err != nil {
		return err
	}
	defer release()
	c.dry.hooks.call(c.dry.hooks.Walking, repo)
	return f()
}
