package registry

import "github.com/reclaim-registry/reclaim/gc/collector"

// SetDryRunHooks installs h on s's collector (collector.DryRunHooks).
func SetDryRunHooks(s *Server, h collector.DryRunHooks) { s.gc.Collector.SetDryRunHooks(h) }
