package reclaimer

import (
	"context"
	"errors"
	"time"

	"github.com/reclaim-registry/reclaim/gc/collector"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// Each reclaimer tick also refreshes the usage estimates of a few
// repositories (Config.UsageRefresh, default 4), so the rankings
// stay current without any request ever costing O(registry):
//
//	1. the repositories marked due (a capped collect), claimed with the
//	   tick's lease so two instances do not refresh the same one;
//	2. then the oldest estimates made more than UsageMaxAge ago (default 1h);
//	3. then repositories that have no estimate yet, found by walking the
//	   catalog a page at a time from a cursor kept in the store (back to the
//	   start at its end).
//
// One refresh is one dry run of one repository plus its usage checks
// (Collector.RefreshUsage, gc/collector/usage.go), kept out of the collector's runs (nobody asked for it: a
// few every tick would crowd out the runs people did ask for); a
// repository found gone loses its record.

// Defaults of the usage refresh.
const (
	DefaultUsageRefresh = 4
	DefaultUsageMaxAge  = time.Hour
	// usageWalkPage is how many catalog names one tick looks at for
	// repositories without an estimate.
	usageWalkPage = 100
)

// UsageStore is where the usage refresh finds what to refresh: the store
// the collector writes estimates to (redisstate's UsageStore).
type UsageStore interface {
	// ClaimDueUsage takes up to n repositories marked due and holds them
	// for lease; DoneDueUsage unmarks one, unless it was marked again
	// since the claim.
	ClaimDueUsage(ctx context.Context, n int, lease time.Duration) ([]reclaim.UsageClaim, error)
	DoneDueUsage(ctx context.Context, c reclaim.UsageClaim) error
	// StaleUsage lists up to n repositories whose record was computed
	// before, oldest first.
	StaleUsage(ctx context.Context, n int, before time.Time) ([]string, error)
	// MissingUsage returns those of repos that have no record.
	MissingUsage(ctx context.Context, repos []string) ([]string, error)
	// UsageCursor is where the walk of the catalog stands ("" at its
	// start); SetUsageCursor moves it.
	UsageCursor(ctx context.Context) (string, error)
	SetUsageCursor(ctx context.Context, cursor string) error
}

// refreshUsage spends the tick's usage budget.
func (r *Reclaimer) refreshUsage(ctx context.Context, rep *TickReport) {
	st, budget := r.cfg.Usage, r.cfg.UsageRefresh
	if st == nil || budget <= 0 || rep.Abort == reclaim.AbortRedisUnavailable {
		return
	}
	refresh := func(repo string) bool {
		budget--
		err := r.c.RefreshUsage(ctx, repo)
		if err != nil && !errors.Is(err, collector.ErrRepositoryNotFound) {
			rep.UsageFailed++
			r.cfg.Logf("reclaimer: usage of %s: %v", repo, err)
			return false
		}
		rep.UsageRefreshed++
		return true
	}
	fail := func(what string, err error) {
		rep.UsageFailed++
		r.cfg.Logf("reclaimer: usage: %s: %v", what, err)
	}
	claims, err := st.ClaimDueUsage(ctx, budget, r.cfg.Lease)
	if err != nil {
		fail("claim due", err)
		return
	}
	for _, c := range claims {
		// a failed refresh stays claimed: it comes back after the lease
		if refresh(c.Repo) {
			if err := st.DoneDueUsage(ctx, c); err != nil {
				fail("done "+c.Repo, err)
			}
		}
	}
	if budget > 0 {
		stale, err := st.StaleUsage(ctx, budget, r.cfg.Now().Add(-r.cfg.UsageMaxAge))
		if err != nil {
			fail("stale", err)
			return
		}
		for _, repo := range stale {
			refresh(repo)
		}
	}
	if budget > 0 && r.cfg.Driver != nil {
		if err := r.walkCatalog(ctx, st, &budget, refresh); err != nil {
			fail("catalog", err)
		}
	}
}

// walkCatalog refreshes repositories that have no estimate, from the
// store's cursor on, while budget lasts.
func (r *Reclaimer) walkCatalog(ctx context.Context, st UsageStore, budget *int, refresh func(string) bool) error {
	cursor, err := st.UsageCursor(ctx)
	if err != nil {
		return err
	}
	names, err := layout.Repositories(r.cfg.Context(ctx), r.cfg.Driver, cursor, usageWalkPage)
	if err != nil {
		return err
	}
	missing, err := st.MissingUsage(ctx, names)
	if err != nil {
		return err
	}
	next := "" // the walk reached the end: start again
	if len(names) == usageWalkPage {
		next = names[len(names)-1]
	}
	for i, repo := range missing {
		if *budget <= 0 {
			// the rest of the page comes next tick (i > 0: the budget
			// was positive on entry)
			next = missing[i-1]
			break
		}
		refresh(repo)
	}
	return st.SetUsageCursor(ctx, next)
}
