package registry

import (
	"time"

	"github.com/reclaim-registry/reclaim/internal/config"
	"github.com/reclaim-registry/reclaim/retention"
	"github.com/reclaim-registry/reclaim/retention/redisstore"
	"github.com/reclaim-registry/reclaim/storage/middleware"
)

// retentionBackend is what the retention endpoints need.
type retentionBackend struct {
	Policy     retention.Policy // the configured defaults
	Planner    *retention.Planner
	Applier    *retention.Applier
	Plans      *redisstore.Plans
	PlanMaxAge time.Duration
	PlanKeep   time.Duration
}

// PolicyOf is the configured default policy.
func PolicyOf(r config.Retention) retention.Policy {
	return retention.Policy{KeepNewest: r.KeepNewest, RollbackSlack: r.RollbackSlack, MinAge: retention.Duration(r.MinAge),
		Include: r.Include, Exclude: r.Exclude, Sources: r.Sources, Cap: r.Cap}
}

func newRetentionBackend(env *middleware.Env, opts config.Options, pins *redisstore.Pins, inuse *redisstore.InUse) *retentionBackend {
	st := retentionStorage{raw: env.Raw, driver: env.Driver, fences: env.Tracker}
	r := opts.Retention
	return &retentionBackend{
		Policy:     PolicyOf(r),
		Planner:    &retention.Planner{Tags: st, Manifests: st, Index: inuse, Pins: pins, MaxAge: r.InUseMaxAge, Now: time.Now},
		Applier:    &retention.Applier{Tags: st, Manifests: st, Index: inuse, InUse: inuse, Pins: pins, MaxAge: r.InUseMaxAge, Recheck: r.Recheck, Now: time.Now},
		Plans:      redisstore.NewPlans(env.Tracker.Client(), opts.Prefix, r.PlanKeep),
		PlanMaxAge: r.PlanMaxAge,
		PlanKeep:   r.PlanKeep,
	}
}
