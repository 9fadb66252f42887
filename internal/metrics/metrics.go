// Package metrics declares Reclaim's Prometheus metrics in one line each.
// Every metric is named reclaim_<subsystem>_<name> and lives in Prometheus'
// default registry, which Distribution's debug server exposes at
// http.debug.prometheus.path.
package metrics

import "github.com/prometheus/client_golang/prometheus"

const namespace = "reclaim"

// Counter registers a counter.
func Counter(subsystem, name, help string) prometheus.Counter {
	return register(prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Subsystem: subsystem, Name: name, Help: help}))
}

// CounterVec registers a counter with labels.
func CounterVec(subsystem, name, help string, labels ...string) *prometheus.CounterVec {
	return register(prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: subsystem, Name: name, Help: help}, labels))
}

// Gauge registers a gauge.
func Gauge(subsystem, name, help string) prometheus.Gauge {
	return register(prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Subsystem: subsystem, Name: name, Help: help}))
}

// Histogram registers a histogram with the given buckets.
func Histogram(subsystem, name, help string, buckets []float64) prometheus.Histogram {
	return register(prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Subsystem: subsystem, Name: name, Help: help, Buckets: buckets}))
}

// HistogramVec registers a histogram with labels.
func HistogramVec(subsystem, name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return register(prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Subsystem: subsystem, Name: name, Help: help, Buckets: buckets}, labels))
}

func register[C prometheus.Collector](c C) C {
	prometheus.MustRegister(c)
	return c
}
