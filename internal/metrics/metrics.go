// Package metrics declares Reclaim's Prometheus metrics in one line each.
// Every metric is named reclaim_<subsystem>_<name> and lives in Prometheus'
// default registry, which Distribution's debug server exposes at
// http.debug.prometheus.path.
package metrics

import (
	"sort"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

const namespace = "reclaim"

// Counter registers a counter.
func Counter(subsystem, name, help string) prometheus.Counter {
	return register(subsystem, name, prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Subsystem: subsystem, Name: name, Help: help}))
}

// CounterVec registers a counter with labels.
func CounterVec(subsystem, name, help string, labels ...string) *prometheus.CounterVec {
	return register(subsystem, name, prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: subsystem, Name: name, Help: help}, labels))
}

// Gauge registers a gauge.
func Gauge(subsystem, name, help string) prometheus.Gauge {
	return register(subsystem, name, prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Subsystem: subsystem, Name: name, Help: help}))
}

// Histogram registers a histogram with the given buckets.
func Histogram(subsystem, name, help string, buckets []float64) prometheus.Histogram {
	return register(subsystem, name, prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Subsystem: subsystem, Name: name, Help: help, Buckets: buckets}))
}

// HistogramVec registers a histogram with labels.
func HistogramVec(subsystem, name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return register(subsystem, name, prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Subsystem: subsystem, Name: name, Help: help, Buckets: buckets}, labels))
}

func register[C prometheus.Collector](subsystem, name string, c C) C {
	prometheus.MustRegister(c)
	registered.Lock()
	defer registered.Unlock()
	registered.names = append(registered.names, prometheus.BuildFQName(namespace, subsystem, name))
	return c
}

var registered struct {
	sync.Mutex
	names []string
}

// Names lists the name of every metric registered through this package so
// far (only the packages linked into the program have registered theirs),
// sorted. The dashboard and the alert rules in docs/ are checked against it.
func Names() []string {
	registered.Lock()
	defer registered.Unlock()
	out := append([]string(nil), registered.names...)
	sort.Strings(out)
	return out
}
