package registry

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/reclaim-registry/reclaim/gc"
	"github.com/reclaim-registry/reclaim/gc/collector"
	"github.com/reclaim-registry/reclaim/gc/reclaimer"
	"github.com/reclaim-registry/reclaim/internal/config"
	"github.com/reclaim-registry/reclaim/internal/metrics"
	"github.com/reclaim-registry/reclaim/internal/pause"
	"github.com/reclaim-registry/reclaim/redisstate"
	"github.com/reclaim-registry/reclaim/redisstate/usage"
	"github.com/reclaim-registry/reclaim/storage/middleware"
)

// The background reclaimer runs inside `serve`, on every instance whose
// config enables it (config.Reclaimer), on the Server's collector: the same
// wrapped driver, tracker and Redis client as the registry's own requests.

// NewReclaimer builds a reclaimer on the Server's collector and review
// queue, with the kill switch set to enabled and the rest of the
// `reclaimer:` block. It is not started: the Server runs its own (Start);
// `registry gc sweep --apply` reviews blobs with one switched on. It fails
// without the reclaim middleware, and on a pull-through cache.
func (s *Server) NewReclaimer(enabled bool) (*reclaimer.Reclaimer, error) {
	switch {
	case !s.on:
		return nil, fmt.Errorf("the %q storage middleware is not configured", config.MiddlewareName)
	case s.gc == nil:
		return nil, config.ErrProxyGC
	}
	rc := s.opts.Reclaimer
	refresh, scrub := rc.UsageRefresh, rc.ScrubRepos
	if refresh == 0 {
		refresh = -1 // configured off; gc's 0 is its default
	}
	if scrub == 0 {
		scrub = -1 // likewise
	}
	env := s.env
	return reclaimer.New(reclaimer.Config{
		// what the collector is wired to (wire.go)
		Collector: s.gc.Collector, Queue: env.Queue(), Driver: testDriver(env.Driver),
		Context: middleware.ForGC, Freed: env.Tracker, Usage: s.gc.Usage,
		Repair: env.Links, MarkLinkDBIncomplete: markLinkDBIncomplete(env), Deletions: s.deletions,
		Enabled: enabled, Interval: rc.Interval, Batch: rc.Batch, Workers: rc.Workers, Lease: rc.Lease,
		UsageRefresh: refresh, UsageMaxAge: rc.UsageMaxAge,
		ScrubRepos: scrub, ScrubCursor: redisstate.NewScrubCursor(env.Tracker.Client(), s.opts.Prefix),
		Trash: s.trashPurger(), PurgeBatch: s.opts.Trash.PurgeBatch,
		Logf:    logrus.WithField("component", "reclaimer").Warnf,
		Observe: observeTick,
	})
}

// Start runs the background reclaimer when `reclaimer.enabled` is true,
// until Close.
func (s *Server) Start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reclaimer == nil || s.stop != nil {
		return
	}
	ctx, stop := context.WithCancel(s.base)
	s.stop = stop
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		s.reclaimer.Run(ctx)
	}()
	go func() {
		defer s.wg.Done()
		s.watchQueue(ctx)
	}()
	metricReclaimerEnabled.Set(1)
	logrus.WithFields(logrus.Fields{"interval": s.opts.Reclaimer.Interval, "batch": s.opts.Reclaimer.Batch}).Info("reclaim: background reclaimer started")
}

// watchQueue refreshes the queue gauges between ticks as well, cheaply.
func (s *Server) watchQueue(ctx context.Context) {
	q := s.env.Queue()
	pause.Every(ctx, s.opts.Reclaimer.Interval, func() {
		if total, due, err := q.Len(ctx); err == nil {
			metricQueueLength.Set(float64(total))
			metricQueueDue.Set(float64(due))
		}
	})
}

var (
	_ reclaimer.Queue      = (*redisstate.Queue)(nil)
	_ reclaimer.UsageStore = (*usage.Store)(nil)
)

// Reclaimer metrics, in Prometheus' default registry, named like the JSON.
var (
	metricReclaimerEnabled     = metrics.Gauge("reclaimer", "enabled", "1 when the background reclaimer runs in this process.")
	metricReclaimerTicks       = metrics.CounterVec("reclaimer", "ticks_total", "Reclaimer ticks by result: ok, failed, or the abort reason that stopped them.", "result")
	metricReclaimerReviewed    = metrics.CounterVec("reclaimer", "reviewed_total", "Blobs reviewed by decision reason (unreferenced and already_gone are deletions).", "reason")
	metricReclaimerBytes       = metrics.Counter("reclaimer", "bytes_freed_total", "Bytes of blob data the reclaimer deleted.")
	metricReclaimerTickSeconds = metrics.Histogram("reclaimer", "tick_duration_seconds", "Wall time of reclaimer ticks.", prometheus.ExponentialBuckets(0.001, 4, 10))
	metricReclaimerLastTick    = metrics.Gauge("reclaimer", "last_tick_timestamp_seconds", "Unix time of the last reclaimer tick.")
	metricQueueLength          = metrics.Gauge("reclaimer", "queue_length", "Blobs in the review queue.")
	metricQueueDue             = metrics.Gauge("reclaimer", "queue_due", "Blobs in the review queue that are due now.")
	metricScrubRepositories    = metrics.Counter("reclaimer", "scrub_repositories_total", "Repositories the reclaimer's scrub checked for missing reverse links.")
	metricScrubLinks           = metrics.Counter("reclaimer", "scrub_links_total", "Forward links the reclaimer's scrub checked for their reverse link.")
	metricScrubRepaired        = metrics.Counter("reclaimer", "scrub_repaired_total", "Missing reverse links the reclaimer's scrub wrote back.")
	metricScrubFailed          = metrics.Counter("reclaimer", "scrub_failed_total", "Reads and writes the reclaimer's scrub could not do (a failed write also marks the link database incomplete).")
	metricUsageRefreshes       = metrics.CounterVec("reclaimer", "usage_refreshes_total", "Repository usage estimates the reclaimer refreshed, by result (ok, failed).", "result")
)

func observeTick(t reclaimer.TickReport) {
	result := "ok"
	switch {
	case t.Abort != "":
		result = string(t.Abort)
	case t.Failed:
		result = "failed"
	}
	metricReclaimerTicks.WithLabelValues(result).Inc()
	metricReclaimerTickSeconds.Observe(t.Duration.Seconds())
	metricReclaimerLastTick.Set(float64(t.Started.Unix()))
	for _, d := range t.Decisions {
		metricReclaimerReviewed.WithLabelValues(d.Reason.String()).Inc()
	}
	_, bytes := t.Deleted()
	metricReclaimerBytes.Add(float64(bytes))
	metricUsageRefreshes.WithLabelValues("ok").Add(float64(t.UsageRefreshed))
	metricUsageRefreshes.WithLabelValues("failed").Add(float64(t.UsageFailed))
	metricScrubRepositories.Add(float64(t.Scrub.Repositories))
	metricScrubLinks.Add(float64(t.Scrub.Links))
	metricScrubRepaired.Add(float64(t.Scrub.Repaired))
	metricScrubFailed.Add(float64(t.Scrub.Failed))
}

// trashPurger is the trash's purge as the reclaimer runs it each tick;
// nil when the trash is off.
func (s *Server) trashPurger() reclaimer.TrashPurger {
	if s.trash == nil {
		return nil
	}
	return func(ctx context.Context, orphans *collector.Orphans, now time.Time, max int) ([]gc.Decision, int, error) {
		rep, err := s.trash.PurgeExpired(ctx, orphans, now, max)
		var freed []gc.Decision
		for _, e := range rep.Entries {
			if e.Error != "" {
				logrus.WithField("component", "reclaimer").Warnf("reclaimer: trash purge %s: %s", e.Entry.ID, e.Error)
			}
			for _, d := range e.Errors {
				logrus.WithField("component", "reclaimer").Warnf("reclaimer: trash purge %s: %s %s: %s", e.Entry.ID, d.Reason, d.Digest, d.Detail)
			}
			if e.Blob != nil && e.Blob.Deleted() {
				freed = append(freed, *e.Blob)
			}
		}
		return freed, len(rep.Entries), err
	}
}

// reindexTrash writes the trash index again from storage, in the
// background, within GC's storage budget.
func (s *Server) reindexTrash() {
	rep, err := s.trash.Reindex(middleware.ForGC(s.base))
	log := logrus.WithField("component", "trash")
	if err != nil {
		log.WithError(err).Warn("reclaim: trash reindex at start (embedded Redis) failed: entries before the restart are not listed or purged; their data stays")
		return
	}
	log.Infof("reclaim: trash reindexed at start (embedded Redis): %d entries from %d blobs", rep.Entries, rep.Blobs)
}
