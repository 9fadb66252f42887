package registry

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/reclaim-registry/reclaim/gc"
	"github.com/reclaim-registry/reclaim/internal/config"
	"github.com/reclaim-registry/reclaim/storage/tracker"
)

// The background reclaimer runs inside `serve`, on every instance whose
// config enables it (config.Reclaimer), on the Server's collector: the same
// wrapped driver, tracker and Redis client as the registry's own requests.

// NewReclaimer builds a reclaimer on the Server's collector and review
// queue, with the kill switch set to enabled and the rest of the
// `reclaimer:` block. It is not started: the Server runs its own (Start);
// `registry gc sweep --apply` reviews blobs with one switched on. It fails
// without the reclaim middleware, and on a pull-through cache.
func (s *Server) NewReclaimer(enabled bool) (*gc.Reclaimer, error) {
	switch {
	case !s.on:
		return nil, fmt.Errorf("the %q storage middleware is not configured", config.MiddlewareName)
	case s.gc == nil:
		return nil, config.ErrProxyGC
	}
	rc := s.opts.Reclaimer
	return gc.NewReclaimer(s.gc.Collector, gcQueue{s.env.Queue()}, gc.ReclaimerConfig{
		Enabled: enabled, Interval: rc.Interval, Batch: rc.Batch, Workers: rc.Workers, Lease: rc.Lease,
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
	t := time.NewTicker(s.opts.Reclaimer.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if total, due, err := q.Len(ctx); err == nil {
				metricQueueLength.Set(float64(total))
				metricQueueDue.Set(float64(due))
			}
		}
	}
}

// gcQueue adapts *tracker.Queue to gc.Queue.
type gcQueue struct{ q *tracker.Queue }

var _ gc.Queue = gcQueue{}

func (a gcQueue) Claim(ctx context.Context, n int, lease time.Duration) ([]gc.QueueItem, error) {
	cs, err := a.q.Claim(ctx, n, lease)
	if err != nil {
		return nil, err
	}
	out := make([]gc.QueueItem, len(cs))
	for i, c := range cs {
		out[i] = gc.QueueItem{Blob: c.Blob, Due: c.Due, Lease: c.Lease}
	}
	return out, nil
}

func toClaimed(it gc.QueueItem) tracker.Claimed {
	return tracker.Claimed{Blob: it.Blob, Due: it.Due, Lease: it.Lease}
}

func (a gcQueue) Done(ctx context.Context, it gc.QueueItem) error {
	return a.q.Done(ctx, toClaimed(it))
}

func (a gcQueue) Requeue(ctx context.Context, it gc.QueueItem, due time.Time) error {
	return a.q.Requeue(ctx, toClaimed(it), due)
}

func (a gcQueue) Len(ctx context.Context) (int64, int64, error) {
	t, d, err := a.q.Len(ctx)
	return t, d, err
}

// Reclaimer metrics, in Prometheus' default registry, named like the JSON.
var (
	metricReclaimerEnabled = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "reclaim", Subsystem: "reclaimer", Name: "enabled",
		Help: "1 when the background reclaimer runs in this process.",
	})
	metricReclaimerTicks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "reclaim", Subsystem: "reclaimer", Name: "ticks_total",
		Help: "Reclaimer ticks by result: ok, failed, or the abort reason that stopped them.",
	}, []string{"result"})
	metricReclaimerReviewed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "reclaim", Subsystem: "reclaimer", Name: "reviewed_total",
		Help: "Blobs reviewed by decision reason (unreferenced and already_gone are deletions).",
	}, []string{"reason"})
	metricReclaimerBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "reclaim", Subsystem: "reclaimer", Name: "bytes_freed_total",
		Help: "Bytes of blob data the reclaimer deleted.",
	})
	metricReclaimerTickSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "reclaim", Subsystem: "reclaimer", Name: "tick_duration_seconds",
		Help:    "Wall time of reclaimer ticks.",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
	})
	metricReclaimerLastTick = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "reclaim", Subsystem: "reclaimer", Name: "last_tick_timestamp_seconds",
		Help: "Unix time of the last reclaimer tick.",
	})
	metricQueueLength = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "reclaim", Subsystem: "reclaimer", Name: "queue_length",
		Help: "Blobs in the review queue.",
	})
	metricQueueDue = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "reclaim", Subsystem: "reclaimer", Name: "queue_due",
		Help: "Blobs in the review queue that are due now.",
	})
)

func init() {
	prometheus.MustRegister(metricReclaimerEnabled, metricReclaimerTicks, metricReclaimerReviewed, metricReclaimerBytes,
		metricReclaimerTickSeconds, metricReclaimerLastTick, metricQueueLength, metricQueueDue)
}

func observeTick(t gc.TickReport) {
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
}
