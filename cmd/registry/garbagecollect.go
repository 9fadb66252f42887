package main

import (
	"errors"

	distregistry "github.com/distribution/distribution/v3/registry"
	"github.com/spf13/cobra"

	"github.com/reclaim-registry/reclaim/internal/config"
)

// errOnlineGC is why upstream's garbage-collect refuses to run on a registry
// that has Reclaim's link database.
var errOnlineGC = errors.New(`garbage-collect: this configuration uses the "reclaim" storage middleware (online GC).
Upstream's offline garbage-collect works on the raw storage driver: it would delete blobs together
with their reverse links while leaving forward layer links behind, and it ignores access records and
fences, so it could delete a blob a concurrent push is about to reference.
Use Reclaim's online GC instead (the GC API, or "registry gc"), which is safe while serving.
If you really want the offline collector: stop the registry, remove the reclaim middleware from
the configuration, run garbage-collect, then run "registry linkdb rebuild" before enabling it again`)

// guardGarbageCollect makes upstream's garbage-collect refuse to run when
// the reclaim middleware is configured. Distribution hands that command the
// raw driver, so it cannot keep the link database straight.
func guardGarbageCollect(gc *cobra.Command) {
	prev := gc.PreRunE
	gc.PreRunE = func(cmd *cobra.Command, args []string) error {
		if prev != nil {
			if err := prev(cmd, args); err != nil {
				return err
			}
		}
		conf, err := readConfig(configPath(args))
		if err != nil {
			return nil // upstream reports a missing or unreadable configuration
		}
		if config.Enabled(conf) {
			return errOnlineGC
		}
		return nil
	}
}

func init() { guardGarbageCollect(distregistry.GCCmd) }
