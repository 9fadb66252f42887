package collector

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
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/reclaim/gcrun"
)

// Defaults, chosen to be safe on a registry nobody has tuned.
const (
	defaultWindow     = 24 * time.Hour
	defaultCap        = 10000
	defaultFenceLease = 2 * time.Minute
	// defaultLockLease is short because the tracker renews the lock while
	// the run lives: a crashed run blocks its repository for at most this.
	defaultLockLease = time.Minute
	defaultPlanTTL   = time.Hour
	defaultRunTTL    = 24 * time.Hour
	maxStoredRuns    = 1000
)

// Config wires a Collector to storage and the tracker.
type Config struct {
	// Driver is the storage driver wrapped by the reclaim middleware, so
	// that deleting a forward link also removes its reverse link.
	Driver  storagedriver.StorageDriver
	Tracker Tracker
	Links   LinkIndex
	// Clock is optional: the tracker's clock, which access records are
	// compared against. Nil: Now, the local clock (skew between instances
	// then eats into the window).
	Clock Clock
	// Runs is optional: where real runs keep their records for every
	// instance (run records, interrupted runs, their reconciliation). Nil:
	// a run is known only to the process that ran it, nothing is found
	// interrupted and nothing is reconciled.
	Runs RunRecorder
	// Freed is optional: where collects and reclaimer ticks add what they
	// deleted to the daily sums. Nil: no sums are kept.
	Freed FreedCounter
	// LinkDBComplete reports whether the reverse-link database is known
	// to be complete. Until it is, a run may unlink but never deletes a
	// blob; nil means "not known to be complete".
	LinkDBComplete func(ctx context.Context) (bool, error)
	// Repair is optional: where a run writes back a reverse link it finds
	// missing for one of its repository's forward links (gc/collector/repair.go).
	// Without it such a link is only reported.
	Repair LinkRepairer
	// MarkLinkDBIncomplete is optional: it removes the completeness
	// marker, when a missing reverse link could not be written back.
	MarkLinkDBIncomplete func(ctx context.Context) error
	// Pinner is optional. A run asks it about several manifests at once,
	// so it must be safe for concurrent use.
	Pinner  Pinner
	Evictor Evictor // optional; the reclaim middleware evicts on delete already
	// Review is optional: where a run queues the orphaned blobs it finds
	// when it reconciles an interrupted run.
	Review Enqueuer
	// Usage is optional: where runs write the repository's usage
	// (gc/collector/usage.go) and the reclaimer finds what to refresh.
	Usage UsageStore
	// Trash is optional: where removed objects are held so that they can
	// be restored (trash.keep > 0). Nil: every delete is final.
	Trash TrashHolder
	// Deletions is optional: it hears, once per real run and after its
	// delete phase, what the run deleted (the deletion events). Nil: nobody.
	Deletions reclaim.DeletionSink
	// Context, when set, derives the context of every run's storage and
	// tracker calls; the registry passes middleware.ForGC so the run's own
	// reads do not count as access and its storage calls stay within GC's
	// storage budget.
	Context func(context.Context) context.Context

	Window       time.Duration // protection window W; default 24h
	Cap          int           // max link deletions per run; 0 = 10000, <0 = none
	KeepUntagged bool          // policy: keep every untagged manifest
	// DryRuns bounds the dry runs walking at once (dryruns.go); 0 means
	// 4. DryRunWait is how long one more waits for a slot; 0 means 5s,
	// negative not at all.
	DryRuns    int
	DryRunWait time.Duration
	FenceLease time.Duration // a fence's lease; default 2m
	LockLease  time.Duration // the repository lock's lease; default 1m
	PlanTTL    time.Duration // how long a Plan is kept; default 1h
	Now        func() time.Time
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
	// recorder keeps run records (Config.Runs; nil: in memory only);
	// instance names this collector when it marks a run interrupted.
	recorder RunRecorder
	instance string

	dry *dryRuns

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
		cfg.Window = defaultWindow
	}
	if cfg.Window < 0 {
		return nil, fmt.Errorf("gc: window %s must be positive", cfg.Window)
	}
	switch {
	case cfg.Cap == 0:
		cfg.Cap = defaultCap
	case cfg.Cap < 0:
		cfg.Cap = 0
	}
	if cfg.FenceLease <= 0 {
		cfg.FenceLease = defaultFenceLease
	}
	if cfg.LockLease <= 0 {
		cfg.LockLease = defaultLockLease
	}
	if cfg.PlanTTL <= 0 {
		cfg.PlanTTL = defaultPlanTTL
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.DryRuns <= 0 {
		cfg.DryRuns = defaultDryRuns
	}
	switch {
	case cfg.DryRunWait == 0:
		cfg.DryRunWait = defaultDryRunWait
	case cfg.DryRunWait < 0:
		cfg.DryRunWait = 0
	}
	return &Collector{
		cfg: cfg, clock: realClock{}, driver: cfg.Driver, tracker: cfg.Tracker, links: cfg.Links,
		pinner: cfg.Pinner, evictor: cfg.Evictor, recorder: cfg.Runs, instance: newID(),
		plans: map[string]*Plan{}, runs: map[string]*storedRun{}, dry: newDryRuns(cfg.DryRuns, cfg.DryRunWait),
	}, nil
}

// Instance names this collector in run records and deletion events.
func (c *Collector) Instance() string { return c.instance }

// Window is the protection window the collector uses.
func (c *Collector) Window() time.Duration { return c.cfg.Window }

// ValidateName checks a repository name against the reference grammar.
func ValidateName(repo string) error {
	n, err := reference.WithName(repo)
	if err != nil || n.Name() != repo {
		return fmt.Errorf("%w: %q", ErrInvalidName, repo)
	}
	return nil
}

// runContext derives the context of a run's storage and tracker calls.
func (c *Collector) runContext(ctx context.Context) context.Context {
	if c.cfg.Context != nil {
		return c.cfg.Context(ctx)
	}
	return ctx
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
		if now.After(r.expires) || len(c.runs) > maxStoredRuns && r.report.Status != gcrun.StatusRunning {
			delete(c.runs, id)
		}
	}
}

func (c *Collector) storePlan(p *Plan) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gcLocked(p.CreatedAt)
	c.plans[p.ID] = p
}

func (c *Collector) store(rep *Report) {
	cp := *rep // the stored copy is never mutated again
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gcLocked(c.cfg.Now())
	c.runs[rep.RunID] = &storedRun{report: &cp, expires: c.cfg.Now().Add(defaultRunTTL)}
}

func newID() string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return hex.EncodeToString(b[:])
}
