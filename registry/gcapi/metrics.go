package gcapi

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/reclaim-registry/reclaim/gc/collector"
	"github.com/reclaim-registry/reclaim/internal/metrics"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/reclaim/gcrun"
)

// GC metrics, in Prometheus' default registry (served by Distribution's
// debug server at http.debug.prometheus.path). All derive from the run
// reports, so they use the same reason names as the JSON.
var (
	metricRuns       = metrics.CounterVec("gc", "runs_total", "GC runs by outcome (done, aborted, failed) and mode (dry_run true/false).", "status", "dry_run")
	metricDeleted    = metrics.CounterVec("gc", "deleted_total", "Objects deleted by real runs, by kind (manifest, layer_link, blob).", "kind")
	metricBytesFreed = metrics.Counter("gc", "bytes_freed_total", "Bytes of blob data deleted by real runs.")
	metricKept       = metrics.CounterVec("gc", "kept_total", "Objects kept by real runs, by kind and reason.", "kind", "reason")
	metricAborts     = metrics.CounterVec("gc", "aborts_total", "Runs refused or aborted before deleting anything, by reason.", "reason")
	metricRepaired   = metrics.CounterVec("gc", "reverse_links_repaired_total", "Forward links of the collected repository found without their reverse link, by outcome (written, would_write in a dry run, failed: the link database was marked incomplete, reported).", "outcome")
	metricDuration   = metrics.Histogram("gc", "run_duration_seconds", "Wall time of finished runs.", prometheus.ExponentialBuckets(0.01, 4, 10))
)

// observe records a finished synchronous run.
func observe(rep *collector.Report, err error) {
	if err != nil {
		observeAbort(err)
	}
	if rep == nil {
		return
	}
	metricRuns.WithLabelValues(string(rep.Status), boolLabel(rep.DryRun)).Inc()
	if !rep.FinishedAt.IsZero() {
		metricDuration.Observe(rep.FinishedAt.Sub(rep.StartedAt).Seconds())
	}
	for _, rp := range rep.ReverseLinksRepaired {
		metricRepaired.WithLabelValues(rp.Outcome).Inc()
	}
	if rep.DryRun || rep.Status != gcrun.StatusDone {
		return
	}
	metricDeleted.WithLabelValues(string(reclaim.KindManifest)).Add(float64(len(rep.ManifestsDeleted)))
	metricDeleted.WithLabelValues(string(reclaim.KindLayerLink)).Add(float64(len(rep.LayersUnlinked)))
	metricDeleted.WithLabelValues(string(reclaim.KindBlob)).Add(float64(len(rep.BlobsDeleted)))
	metricBytesFreed.Add(float64(rep.BytesFreed))
	for _, k := range rep.Kept {
		metricKept.WithLabelValues(string(k.Kind), k.Reason.String()).Inc()
	}
}

func observeAbort(err error) {
	var ae *collector.AbortError
	switch {
	case errors.As(err, &ae):
		metricAborts.WithLabelValues(ae.Reason.String()).Inc()
	case errors.Is(err, reclaim.ErrRepositoryBusy):
		metricAborts.WithLabelValues("repository_busy").Inc()
	}
}

func boolLabel(b bool) string {
	if b {
		return "true"
	}
	return "false"
}
