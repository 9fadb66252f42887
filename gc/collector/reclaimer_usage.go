package collector

import (
	"context"
	"errors"
	"time"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// Each reclaimer tick also refreshes the usage estimates of a few
// repositories (ReclaimerConfig.UsageRefresh, default 4), so the rankings
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
// (gc/collector/usage.go), kept out of the collector's runs (nobody asked for it: a
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

// refreshUsage spends the tick's usage budget.
func (r *Reclaimer) refreshUsage(ctx context.Context, rep *TickReport) {
	st, budget := r.c.cfg.Usage, r.cfg.UsageRefresh
	if st == nil || budget <= 0 || rep.Abort == reclaim.AbortRedisUnavailable {
		return
	}
	refresh := func(repo string) bool {
		budget--
		_, _, err := r.c.estimate(ctx, repo, true)
		if err != nil && !errors.Is(err, ErrRepositoryNotFound) {
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
		stale, err := st.StaleUsage(ctx, budget, r.c.cfg.Now().Add(-r.cfg.UsageMaxAge))
		if err != nil {
			fail("stale", err)
			return
		}
		for _, repo := range stale {
			refresh(repo)
		}
	}
	if budget > 0 {
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
	names, err := layout.Repositories(r.c.runContext(ctx), r.c.driver, cursor, usageWalkPage)
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
