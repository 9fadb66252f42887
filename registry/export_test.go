package registry

import (
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/reclaim-registry/reclaim/gc/collector"
)

// SetDryRunHooks installs h on s's collector (collector.DryRunHooks).
func SetDryRunHooks(s *Server, h collector.DryRunHooks) { s.gc.Collector.SetDryRunHooks(h) }

// TrashHits reads reclaim_trash_hits_total{repository, kind}.
func TrashHits(repo, kind string) float64 {
	return testutil.ToFloat64(metricTrashHits.WithLabelValues(repo, kind))
}
