package storage

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
)

// Metrics live in Prometheus' default registry, which Distribution's debug
// server exposes at http.debug.prometheus.path (docker/go-metrics' Handler
// serves the default gatherer).
var (
	metricTouches = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "reclaim", Subsystem: "access", Name: "touches_total",
		Help: "Access-record script calls by result (recorded, fenced).",
	}, []string{"result"})
	metricTouchesDeduped = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "reclaim", Subsystem: "access", Name: "touches_deduplicated_total",
		Help: "Read accesses not sent to Redis because the same blob was recorded moments ago.",
	})
	metricRedisErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "reclaim", Subsystem: "redis", Name: "errors_total",
		Help: "Registry-side Redis failures by operation.",
	}, []string{"op"})
	metricRedisGaps = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "reclaim", Subsystem: "redis", Name: "gaps_total",
		Help: "Times Redis came back after failures and the recording epoch was moved forward.",
	})
	metricRedisLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "reclaim", Subsystem: "redis", Name: "latency_seconds",
		Help:    "Latency of tracker scripts.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
	}, []string{"op"})
	metricFences = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "reclaim", Subsystem: "gc", Name: "fence_attempts_total",
		Help: "GC fence attempts by result (taken, recently_accessed, fenced, not_recording).",
	}, []string{"result"})
	metricFenceWaits = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "reclaim", Subsystem: "access", Name: "fence_waits_total",
		Help: "Registry writes that met a fence, by outcome (cleared, refused).",
	}, []string{"outcome"})
	metricRefusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "reclaim", Subsystem: "access", Name: "refusals_total",
		Help: "Registry operations refused with a retryable error, by reason (fenced, redis).",
	}, []string{"reason"})
	metricReverseLinks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "reclaim", Subsystem: "linkdb", Name: "reverse_link_ops_total",
		Help: "Reverse-link writes and deletes by op and result.",
	}, []string{"op", "result"})
	metricStaleCache = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "reclaim", Subsystem: "access", Name: "stale_cache_entries_total",
		Help: "Blob descriptor cache entries dropped because the object was deleted.",
	})
)

func init() {
	prometheus.MustRegister(metricTouches, metricTouchesDeduped, metricRedisErrors, metricRedisGaps,
		metricRedisLatency, metricFences, metricFenceWaits, metricRefusals, metricReverseLinks, metricStaleCache)
}

// logger returns a logger with the request's fields. Distribution's own
// context logger is internal to it; its logrus standard logger carries the
// level and format from config.yml, so we log through that.
func logger(ctx context.Context) *logrus.Entry {
	e := logrus.NewEntry(logrus.StandardLogger())
	for _, k := range []string{"http.request.id", "vars.name"} {
		if v, ok := ctx.Value(k).(string); ok && v != "" {
			e = e.WithField(k, v)
		}
	}
	return e
}
