package middleware

import "github.com/reclaim-registry/reclaim/internal/metrics"

// Metrics live in Prometheus' default registry, which Distribution's debug
// server exposes at http.debug.prometheus.path (docker/go-metrics' Handler
// serves the default gatherer).
var (
	metricTouchesDeduped = metrics.Counter("access", "touches_deduplicated_total", "Read accesses not sent to Redis because the same blob was recorded moments ago.")
	metricFenceWaits     = metrics.CounterVec("access", "fence_waits_total", "Registry writes that met a fence, by outcome (cleared, refused).", "outcome")
	metricRefusals       = metrics.CounterVec("access", "refusals_total", "Registry operations refused with a retryable error, by reason (fenced, redis, collected: what a link write depends on was deleted since its check).", "reason")
	metricReverseLinks   = metrics.CounterVec("linkdb", "reverse_link_ops_total", "Reverse-link writes and deletes by op and result.", "op", "result")
	metricStaleCache     = metrics.Counter("access", "stale_cache_entries_total", "Blob descriptor cache entries dropped because the object was deleted.")
	metricTagLeftovers   = metrics.Counter("access", "tag_leftovers_removed_total", "Tag directories without a current link that a refused tag write left and the middleware removed.")
	metricPulls          = metrics.CounterVec("retention", "pulls_total", "Manifest pulls seen for retention's pulled_within, by result (recorded; ignored: a client in retention.ignorepullsfrom; failed). Pulls within a minute of the last record of the same manifest on this instance are not counted.", "result")
)
