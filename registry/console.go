package registry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/gc/collector"
	"github.com/reclaim-registry/reclaim/internal/config"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/reclaim/trashentry"
	"github.com/reclaim-registry/reclaim/redisstate"
	"github.com/reclaim-registry/reclaim/registry/console"
	"github.com/reclaim-registry/reclaim/registry/gcapi"
	"github.com/reclaim-registry/reclaim/retention"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/linkdb"
	"github.com/reclaim-registry/reclaim/trash"
)

// The operator console (registry/console) at /gc/console/, on the
// registry's own listener and access controller: listing pages need what
// Distribution's catalog needs ("registry:catalog:*"; any authenticated
// caller with htpasswd) and show a run's id only to a caller who may pull
// its repository; a run's page needs "pull" on its repository (an unknown
// id and a run the caller may not pull are the same 404), and a preview
// "delete" on it, as a dry-run collect through the GC API does. Both ask
// for an authenticated caller first. The trash page needs the catalog
// access; a restore from it, what the GC API's restore needs (delete on
// every repository it writes to).

// newConsole serves the console in front of next, on the data the status
// endpoint and the GC API read.
func (s *Server) newConsole(api *gcapi.API, next http.Handler) http.Handler {
	c := &consoleData{s: s, api: api}
	var ranked func(ctx context.Context, by string, n int) ([]reclaim.Usage, int64, error)
	if api.Collector() != nil && s.gc.Usage != nil {
		ranked = s.gc.Usage.Top
	}
	return console.New(console.Config{
		Authorize:    c.authorize,
		Deny:         gcapi.WriteError,
		Overview:     c.overview,
		Runs:         c.runs,
		Run:          c.run,
		Repositories: c.repositories,
		Validate:     gcapi.ValidateRepository,
		Preview:      api.Preview,
		Ranked:       ranked,
		Retention:    c.retention(),
		Trash:        c.trash(),
	}, next)
}

// trash is the trash as the console shows it; nil when it is off. A
// restore asks the GC API's checks (gcapi.API.AuthorizeRestore), then
// calls the same Bin.Restore.
func (c *consoleData) trash() *console.Trash {
	bin := c.s.trash
	if bin == nil {
		return nil
	}
	sel := func(s console.RestoreSelector) trash.Selector {
		return trash.Selector{Repo: s.Repo, Tag: s.Tag, Digest: digest.Digest(s.Digest), Run: s.Run, Plan: s.Plan}
	}
	return &console.Trash{
		Keep:     bin.Keep(),
		List:     func(ctx context.Context) ([]trashentry.Entry, error) { return bin.List(ctx, trash.Filter{}) },
		Held:     bin.Held,
		Hits:     func(ctx context.Context, days int) (int64, error) { return bin.Hits(ctx, time.Now(), days) },
		Validate: func(s console.RestoreSelector) error { return sel(s).Validate() },
		Authorize: func(r *http.Request, s console.RestoreSelector) error {
			return c.api.AuthorizeRestore(r, sel(s))
		},
		Restore: func(ctx context.Context, s console.RestoreSelector) ([]console.Restored, error) {
			rep, err := bin.Restore(ctx, sel(s))
			out := make([]console.Restored, 0, len(rep.Entries))
			for _, e := range rep.Entries {
				out = append(out, console.Restored{Entry: e.Entry, Outcome: e.Outcome, Detail: e.Detail})
			}
			return out, err
		},
	}
}

type consoleData struct {
	s   *Server
	api *gcapi.API
}

var consoleAction = map[console.Access]string{console.Pull: "pull", console.Delete: "delete"}

func (c *consoleData) authorize(r *http.Request, repo string, a console.Access) error {
	switch a {
	case console.List:
		return c.s.access.AuthorizeCatalog(r)
	case console.Authenticated:
		return c.s.access.Authorize(r, "", "")
	}
	return c.s.access.Authorize(r, repo, consoleAction[a])
}

// recentRunsShown is how many shared run records the console's run lists
// read (one Redis read each, with the report).
const recentRunsShown = 50

func (c *consoleData) runs(ctx context.Context) ([]*collector.Report, error) {
	if col := c.api.Collector(); col != nil {
		return col.RecentRuns(ctx, recentRunsShown)
	}
	return nil, nil
}

func (c *consoleData) run(ctx context.Context, id string) (*collector.Report, bool, error) {
	if col := c.api.Collector(); col != nil {
		return col.LookupRun(ctx, id)
	}
	return nil, false, nil
}

// repositories lists repository names in storage order after last, as
// Distribution's catalog does: a walk that stops once it has n names.
func (c *consoleData) repositories(ctx context.Context, last string, n int) ([]string, error) {
	if c.s.env == nil {
		return nil, fmt.Errorf("the %q storage middleware is not configured", config.MiddlewareName)
	}
	return layout.Repositories(ctx, c.s.env.Raw, last, n)
}

// overview reads what GET /gc/v1/status reports, typed for the page.
func (c *consoleData) overview(ctx context.Context) console.Overview {
	o := console.Overview{GCEnabled: c.api.Collector() != nil, WindowSeconds: int64(c.s.opts.Window.Seconds())}
	if !o.GCEnabled {
		o.GCNote = gcapi.ErrDisabled.Error()
	}
	switch {
	case c.s.reclaimer == nil:
		o.ReclaimerNote = "reclaimer.enabled is false: blobs queued for review are not deleted"
		o.EstimatesOff = "reclaimer.enabled is false"
	case c.s.opts.Reclaimer.UsageRefresh == 0:
		o.Reclaimer = c.s.reclaimer.Status(ctx)
		o.EstimatesOff = "reclaimer.usagerefresh is 0"
	default:
		o.Reclaimer = c.s.reclaimer.Status(ctx)
	}
	env := c.s.env
	if env == nil {
		o.Notes = append(o.Notes, fmt.Sprintf("The %q storage middleware is not configured: no access records, no GC.", config.MiddlewareName))
		o.Redis.Error, o.LinkDB.Error = "not configured", "not configured"
		return o
	}
	o.WindowSeconds = int64(env.Window.Seconds())
	if since, err := env.Tracker.RecordingSince(ctx); err != nil {
		o.Redis.Error = err.Error()
	} else {
		o.Redis.OK, o.Redis.RecordingSince, o.Redis.Trusted = true, since, time.Since(since) >= env.Window
	}
	h := env.Tracker.RedisHealth()
	o.Redis.Embedded, o.Redis.Epoch, o.Redis.Policy, o.Redis.Evicts = h.Embedded, h.Epoch, h.MaxmemoryPolicy, h.Evicts
	o.Redis.Persistence, o.Redis.Masters = h.Persistence, len(h.Nodes)
	if h.LastLoss != nil {
		o.Redis.LastLoss, o.Redis.LastLossAt, o.Redis.LastLossDetail = h.LastLoss.Reason.String(), h.LastLoss.At, h.LastLoss.Detail
	}
	if since, ok, err := linkdb.LinkDBComplete(ctx, env.Raw); err != nil {
		o.LinkDB.Error = err.Error()
	} else {
		o.LinkDB.Complete, o.LinkDB.Since = ok, since
	}
	o.Freed = freedState(ctx, env.Tracker)
	return o
}

// freedState sums the tracker's daily freed counts: today, and the last 7
// days (today included).
func freedState(ctx context.Context, t *redisstate.Tracker) console.FreedState {
	days, err := t.Freed(ctx, time.Now(), 7)
	if err != nil {
		return console.FreedState{Error: err.Error()}
	}
	st := console.FreedState{OK: true}
	for i, d := range days {
		sum := console.FreedSum{Bytes: d.Bytes, Objects: d.Objects, Runs: d.Runs}
		if i == 0 {
			st.Today = sum
		}
		st.Week.Bytes, st.Week.Objects, st.Week.Runs = st.Week.Bytes+sum.Bytes, st.Week.Objects+sum.Objects, st.Week.Runs+sum.Runs
	}
	return st
}

// retentionPlansShown is how many stored plans the retention page lists
// (one Redis read each).
const retentionPlansShown = 50

// retention lists the newest stored retention plans of every repository;
// nil when retention is off (the page says so).
func (c *consoleData) retention() func(ctx context.Context) ([]console.RetentionRow, error) {
	if c.api.Collector() == nil || c.s.gc.Retention == nil {
		return nil
	}
	rb := c.s.gc.Retention
	return func(ctx context.Context) ([]console.RetentionRow, error) {
		now := time.Now()
		list, err := rb.Plans.List(ctx, "", now.Add(-rb.PlanKeep), now, retentionPlansShown)
		if err != nil {
			return nil, err
		}
		rows := make([]console.RetentionRow, 0, len(list))
		for _, s := range list {
			p, err := rb.Plans.Get(ctx, s.Repository, s.ID)
			if errors.Is(err, retention.ErrPlanNotFound) {
				continue // expired since the list was read
			}
			if err != nil {
				return rows, err
			}
			row := console.RetentionRow{ID: p.ID, Repository: p.Repository, Status: p.Status, Updated: p.CreatedAt,
				Keep: len(p.Kept), Delete: len(p.Candidates), Policy: policyText(p.Policy)}
			if p.Skip != nil {
				row.Skip = p.Skip.Reason.String() + ": " + p.Skip.Detail
			}
			applies, err := rb.Plans.Applies(ctx, p.Repository, p.ID)
			if err != nil {
				return rows, err
			}
			for _, a := range applies {
				row.Applies = append(row.Applies, retentionApply(a))
			}
			rows = append(rows, row)
		}
		aborted, err := rb.Plans.Aborted(ctx, now.Add(-rb.PlanKeep), retentionPlansShown)
		for _, a := range aborted {
			rows = append(rows, console.RetentionRow{Repository: a.Repository, Status: "aborted", Updated: a.At,
				Skip: a.Reason + ": " + a.Detail})
		}
		return rows, err
	}
}

// retentionApply is an apply's report as the console's retention page
// shows it.
func retentionApply(a retention.ApplyReport) console.RetentionApply {
	out := console.RetentionApply{Started: a.StartedAt, Finished: a.FinishedAt, Deleted: len(a.Deleted)}
	if a.InUseChanged {
		out.IndexNote = a.InUseNote
	}
	for _, t := range a.Skipped {
		out.Left = append(out.Left, t.Reason.String())
	}
	if a.Aborted != nil {
		out.Aborted = a.Aborted.Reason.String() + ": " + a.Aborted.Detail
	}
	return out
}

// policyText is a plan's policy in a few words.
func policyText(p retention.Policy) string {
	days := func(d time.Duration) string {
		if d >= 24*time.Hour && d%(24*time.Hour) == 0 {
			return fmt.Sprintf("%d days", d/(24*time.Hour))
		}
		return d.String()
	}
	text := fmt.Sprintf("keep newest %d, %d below the oldest in use, candidates older than %s",
		p.KeepNewest, p.RollbackSlack, days(time.Duration(p.MinAge)))
	if p.PulledWithin > 0 {
		text += ", keep what was pulled within " + days(time.Duration(p.PulledWithin))
	}
	return text
}
