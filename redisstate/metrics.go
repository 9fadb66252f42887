package redisstate

import "github.com/reclaim-registry/reclaim/internal/metrics"

// Metrics live in Prometheus' default registry, which Distribution's debug
// server exposes at http.debug.prometheus.path.
var (
	metricTouches      = metrics.CounterVec("access", "touches_total", "Access-record script calls by result (recorded, fenced).", "result")
	metricRedisErrors  = metrics.CounterVec("redis", "errors_total", "Registry-side Redis failures by operation.", "op")
	metricRedisGaps    = metrics.Counter("redis", "gaps_total", "Times Redis came back after failures and the recording epoch was moved forward.")
	metricRedisLatency = metrics.HistogramVec("redis", "latency_seconds", "Latency of tracker scripts.", []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1}, "op")
	metricInterrupted  = metrics.Counter("gc", "runs_interrupted_total", "GC runs found dead (their process died while they ran) and marked interrupted, counted by the instance that marked them.")
	metricFences       = metrics.CounterVec("gc", "fence_attempts_total", "GC fence attempts by result (taken, recently_accessed, fenced, not_recording), and confirmations that found the fence lost or not acknowledged by a replica (lost, unreplicated).", "result")
)
