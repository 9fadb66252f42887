package registry

// This file wires every constructor: a newcomer reads the whole graph
// here. New decodes the options and opens the storage Env
// (middleware.Open: the driver stack, Redis, the tracker, the link
// database); open builds on it the collector (collector.New), the
// retention planner and applier, the stores, the referrers backend, and
// the reclaimer (Server.NewReclaimer, reclaimer.go); Handler composes the
// HTTP side: the GC API (gcapi.New), the console (console.New), the
// referrers API, the request scope and the cross-site guard, around
// Distribution's app. What GC, the reclaimer and retention delete goes to
// the notifications endpoints through deletionevents; while trash.keep > 0
// it is held in the trash (trash.New), restorable until it expires.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/distribution/distribution/v3/configuration"
	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/distribution/distribution/v3/registry/storage/driver/factory"

	"github.com/reclaim-registry/reclaim/gc/collector"
	"github.com/reclaim-registry/reclaim/internal/config"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/redisstate"
	"github.com/reclaim-registry/reclaim/redisstate/usage"
	"github.com/reclaim-registry/reclaim/registry/accesscontrol"
	"github.com/reclaim-registry/reclaim/registry/deletionevents"
	"github.com/reclaim-registry/reclaim/registry/gcapi"
	"github.com/reclaim-registry/reclaim/retention"
	"github.com/reclaim-registry/reclaim/retention/redisstore"
	"github.com/reclaim-registry/reclaim/storage/linkdb"
	"github.com/reclaim-registry/reclaim/storage/middleware"
	"github.com/reclaim-registry/reclaim/trash"
)

// openDriver creates the storage driver the referrers index uses when the
// reclaim middleware is not configured (with it, the Env's raw driver).
var openDriver = func(ctx context.Context, conf *configuration.Configuration) (storagedriver.StorageDriver, error) {
	params := conf.Storage.Parameters()
	if params == nil {
		params = configuration.Parameters{}
	}
	return factory.Create(ctx, conf.Storage.Type(), params)
}

// New builds the Server of conf. With the reclaim middleware configured it
// opens the storage Env (bound to conf, so the app Distribution builds from
// conf afterwards stores through it), the collector, and the reclaimer when
// enabled; the background reclaimer waits for Start. A bad option is an
// error naming it (config.OptionError).
func New(ctx context.Context, conf *configuration.Configuration) (*Server, error) {
	opts, on, err := config.Load(conf)
	if err != nil {
		return nil, err
	}
	s := &Server{conf: conf, opts: opts, on: on, access: accesscontrol.New(conf), base: context.WithoutCancel(ctx)}
	if err := s.open(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *Server) open(ctx context.Context) error {
	if !s.on {
		d, err := openDriver(ctx, s.conf)
		if err != nil {
			return fmt.Errorf("open storage for the referrers index: %w", err)
		}
		s.referrers = backendFromDriver(d)
		return nil
	}
	env, err := middleware.Open(ctx, s.conf, s.opts)
	if err != nil {
		return err
	}
	s.env, s.referrers = env, backendFromDriver(env.Raw)
	if s.conf.Proxy.RemoteURL != "" {
		return nil // manifests are stored unverified: no collector (config.ErrProxyGC)
	}
	if ds := deletionevents.New(s.conf); ds != nil {
		s.deletions = ds // a nil *Sink would be a non-nil DeletionSink
	}
	if s.opts.Trash.Keep > 0 {
		s.trash, err = trash.New(trash.Config{Raw: env.Raw, Driver: env.Driver, Tracker: env.Tracker,
			Redis: env.Tracker.Client(), Prefix: s.opts.Prefix, Keep: s.opts.Trash.Keep,
			Retryable: func(err error) bool { return errors.Is(err, middleware.ErrRetryable) }})
		if err != nil {
			return err
		}
		if env.Embedded {
			// an embedded Redis starts empty: the holds in storage are
			// the trash (`registry trash reindex` does this on a real one)
			go s.reindexTrash()
		}
	}
	if s.gc, err = newGC(env, s.opts, s.deletions, s.trash); err != nil {
		return err
	}
	if s.opts.Reclaimer.Enabled {
		s.reclaimer, err = s.NewReclaimer(true)
	}
	return err
}

// Handler composes Reclaim's HTTP features around Distribution's app. A
// request meets them in this order:
//
//	readiness    GET /readyz: ok while Redis answers and is trusted, unauthenticated (ready.go)
//	body idle    a request body that sends nothing for bodyidletimeout ends the request (httptimeouts.go)
//	console      /gc/console/: the operator console's pages (console.go)
//	cross-site   refuses a /gc/v1/ write a browser sent for another site's page (gcapi.CrossSiteGuard)
//	referrers    GET /v2/<name>/referrers/<digest>; index upkeep on manifest PUT and DELETE
//	scope        the request scope the middleware records into; a refused write answers 503
//	trash pulls  a pull that would answer 404 asks the trash index (one round trip); counted, logged, restored with trash.restoreonpull (trashpull.go)
//	GC API       /gc/v1/...: one route table (registry/gcapi/routes.go), GET /gc/v1/status included
//	sha256 only  refuses a link under another digest algorithm before Distribution sees it
//	app          Distribution
//
// scope and sha256 only are there when the reclaim middleware is.
func (s *Server) Handler(app http.Handler) http.Handler {
	h := app
	if s.on {
		h = sha256Only(h)
	}
	api := gcapi.New(s.gcConfig(h))
	h = api
	if s.trash != nil {
		h = trashPulls(s.trash, s.opts.Trash.RestoreOnPull, h)
	}
	if s.on {
		h = s.env.Handler(h)
	}
	h = newReferrersHandler(s.conf, s.referrers, s.access, h)
	return readiness(s.env, bodyIdle(s.HTTP().BodyIdleTimeout, s.newConsole(api, gcapi.CrossSiteGuard(h))))
}

// gcConfig is the GC API's Config: what open built (nothing without the
// middleware or on a pull-through cache: the API answers it is disabled),
// the options, the access controller, the status parts and next.
func (s *Server) gcConfig(next http.Handler) gcapi.Config {
	var c gcapi.Config
	if s.gc != nil {
		c = *s.gc
	}
	c.Options, c.Access, c.Next = s.opts, s.access, next
	if s.env != nil {
		c.RedisHealth = func() any { return s.env.Tracker.RedisHealth() }
	}
	if s.reclaimer != nil {
		c.Reclaimer = func(ctx context.Context) any { return s.reclaimer.Status(ctx) }
	}
	return c
}

// dryRunWait is the config's gc.dryrunwait as gc takes it: there 0 means
// the default and a negative wait none.
func dryRunWait(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// newGC builds the collector on the storage Env: the driver wrapped by the
// reclaim middleware (deletes through it remove reverse links and evict
// descriptor caches), its tracker and link index, and the window; and the
// stores and storage reads the GC API serves from. Handler completes the
// API's Config with the access controller, the status parts and next.
func newGC(env *middleware.Env, opts config.Options, deletions reclaim.DeletionSink, bin *trash.Bin) (*gcapi.Config, error) {
	pins := redisstore.NewPins(env.Tracker.Client(), opts.Prefix, nil)
	usageStore := usage.New(env.Tracker.Client(), opts.Prefix)
	var holder collector.TrashHolder // nil unless the trash is on (no typed nil)
	if bin != nil {
		holder = bin
	}
	col, err := collector.New(collector.Config{
		Trash:   holder,
		Driver:  testDriver(env.Driver),
		Tracker: env.Tracker,
		Links:   env.Links,
		Clock:   env.Tracker,
		Runs:    env.Tracker,
		Freed:   env.Tracker,
		LinkDBComplete: func(ctx context.Context) (bool, error) {
			_, ok, err := linkdb.LinkDBComplete(ctx, env.Raw)
			return ok, err
		},
		// A missing reverse link a run finds is written back through the
		// same store the middleware writes with (gc/collector/repair.go).
		Repair:               env.Links,
		MarkLinkDBIncomplete: markLinkDBIncomplete(env),
		Pinner:               pins,
		Usage:                usageStore,
		Review:               env.Queue(),
		Context:              middleware.ForGC, // within GC's storage budget
		Window:               opts.Window,
		Cap:                  opts.GC.Cap,
		KeepUntagged:         opts.GC.KeepUntagged,
		DryRuns:              opts.GC.DryRuns,
		DryRunWait:           dryRunWait(opts.GC.DryRunWait),
		Deletions:            deletions,
	})
	if err != nil {
		return nil, err
	}
	inuse := redisstore.NewInUse(env.Tracker.Client(), opts.Prefix)
	return &gcapi.Config{Options: opts, Collector: col, Exists: repositoryExists(env.Raw), Status: storageStatus(env),
		Pins: pins, InUse: inuse, Usage: usageStore, Retention: newRetention(env, opts, pins, inuse, deletions, col.Instance(), bin),
		HasVersion: hasVersion(env.Raw), Fenced: manifestFenced(env.Tracker), TagState: env.Tracker.TagState, Trash: bin,
		Deletions: deletions}, nil
}

// markLinkDBIncomplete removes the completeness marker: the collector and
// the reclaimer call it when a reverse link they found missing could not
// be written back.
func markLinkDBIncomplete(env *middleware.Env) func(ctx context.Context) error {
	return func(ctx context.Context) error { return linkdb.MarkLinkDBIncomplete(ctx, env.Raw) }
}

// policyOf is the configured default retention policy.
func policyOf(r config.Retention) retention.Policy {
	return retention.Policy{KeepNewest: r.KeepNewest, RollbackSlack: r.RollbackSlack, MinAge: retention.Duration(r.MinAge),
		Include: r.Include, Exclude: r.Exclude, Sources: r.Sources, Cap: r.Cap, PulledWithin: retention.Duration(r.PulledWithin)}
}

// newRetention builds the retention endpoints' planner and applier on
// storage (storage.go) and the Redis stores; the applier tells
// deletions what it deleted, as the collector named instance.
func newRetention(env *middleware.Env, opts config.Options, pins *redisstore.Pins, inuse *redisstore.InUse,
	deletions reclaim.DeletionSink, instance string, bin *trash.Bin) *gcapi.Retention {
	st := retentionStorage{raw: env.Raw, driver: env.Driver, fences: env.Tracker, trash: bin}
	r := opts.Retention
	var pulls retention.PullReader // nil unless pulls are recorded (no typed nil)
	if env.Pulls != nil {
		pulls = env.Pulls
	}
	return &gcapi.Retention{
		Policy:  policyOf(r),
		Planner: &retention.Planner{Tags: st, Manifests: st, Index: inuse, Pins: pins, Pulls: pulls, MaxAge: r.InUseMaxAge, Now: time.Now},
		Applier: &retention.Applier{Tags: st, Manifests: st, Index: inuse, InUse: inuse, Pins: pins, Pulls: pulls, MaxAge: r.InUseMaxAge, Recheck: r.Recheck, Now: time.Now,
			Deletions: deletions, Instance: instance},
		Plans:      redisstore.NewPlans(env.Tracker.Client(), opts.Prefix, r.PlanKeep),
		PlanMaxAge: r.PlanMaxAge,
		PlanKeep:   r.PlanKeep,
	}
}

// The tracker is each of the collector's interfaces as it is: both speak
// package reclaim, and its fences and run locks are reclaim.Hold and
// gcrun.Handle.
var (
	_ collector.Tracker      = (*redisstate.Tracker)(nil)
	_ collector.Clock        = (*redisstate.Tracker)(nil)
	_ collector.RunRecorder  = (*redisstate.Tracker)(nil)
	_ collector.LinkIndex    = (*linkdb.ReverseLinks)(nil)
	_ collector.LinkRepairer = (*linkdb.ReverseLinks)(nil)
	_ collector.UsageStore   = (*usage.Store)(nil)
	_ collector.FreedCounter = (*redisstate.Tracker)(nil)
)
