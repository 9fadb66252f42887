package storage

import (
	"errors"
	"fmt"

	"github.com/distribution/distribution/v3/configuration"
)

// ErrProxyGC: GC is enabled on a pull-through cache. Distribution stores a
// proxied manifest without verifying its references (the content arrives
// lazily from the remote), so they are never fence-checked and GC could
// delete what a cached manifest is about to need.
var ErrProxyGC = errors.New("storage: garbage collection is not supported on a pull-through cache (proxy.remoteurl is set)")

// CheckProxyGC fails with ErrProxyGC when config runs a pull-through cache
// (proxy.remoteurl) and the reclaim middleware's options enable the GC API
// or the reclaimer. Open refuses such a configuration, and so does `serve`
// before it starts (registry/config.go).
func CheckProxyGC(config *configuration.Configuration) error {
	if config == nil || config.Proxy.RemoteURL == "" {
		return nil
	}
	for _, mw := range config.Middleware["storage"] {
		if mw.Name != MiddlewareName || mw.Disabled {
			continue
		}
		for _, k := range []string{"gc", "reclaimer"} {
			m, _ := OptionMap(mw.Options[k])
			if on, _ := m["enabled"].(bool); on {
				return fmt.Errorf("%w: set %s.enabled to false in the reclaim middleware options, or remove proxy.remoteurl", ErrProxyGC, k)
			}
		}
	}
	return nil
}
