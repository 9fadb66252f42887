package registry

import "github.com/reclaim-registry/reclaim/gc"

// SetDryRunHooks installs h on s's collector (gc.DryRunHooks).
func SetDryRunHooks(s *Server, h gc.DryRunHooks) { s.gc.Collector.SetDryRunHooks(h) }
