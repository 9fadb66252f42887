package gcapi

import (
	"time"

	"github.com/reclaim-registry/reclaim/retention"
	"github.com/reclaim-registry/reclaim/retention/redisstore"
)

// Retention is what the retention endpoints need (Config.Retention).
type Retention struct {
	Policy     retention.Policy // the configured defaults
	Planner    *retention.Planner
	Applier    *retention.Applier
	Plans      *redisstore.Plans
	PlanMaxAge time.Duration
	PlanKeep   time.Duration
}
