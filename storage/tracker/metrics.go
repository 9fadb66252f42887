package tracker

import "github.com/prometheus/client_golang/prometheus"

// Metrics live in Prometheus' default registry, which Distribution's debug
// server exposes at http.debug.prometheus.path.
var (
	metricTouches = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "reclaim", Subsystem: "access", Name: "touches_total",
		Help: "Access-record script calls by result (recorded, fenced).",
	}, []string{"result"})
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
)

func init() {
	prometheus.MustRegister(metricTouches, metricRedisErrors, metricRedisGaps, metricRedisLatency, metricFences)
}
