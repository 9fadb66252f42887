package storage

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics live in Prometheus' default registry, which Distribution's debug
// server exposes at http.debug.prometheus.path (docker/go-metrics' Handler
// serves the default gatherer).
var (
	metricTouchesDeduped = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "reclaim", Subsystem: "access", Name: "touches_deduplicated_total",
		Help: "Read accesses not sent to Redis because the same blob was recorded moments ago.",
	})
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
	prometheus.MustRegister(metricTouchesDeduped, metricFenceWaits, metricRefusals, metricReverseLinks, metricStaleCache)
}
