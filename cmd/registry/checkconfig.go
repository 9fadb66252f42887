package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/distribution/distribution/v3/configuration"
	distregistry "github.com/distribution/distribution/v3/registry"
	"github.com/spf13/cobra"

	"github.com/reclaim-registry/reclaim/registry"
	"github.com/reclaim-registry/reclaim/storage"
)

// Distribution builds the storage middlewares inside handlers.NewApp and
// panics when one of them returns an error, so a typo in the reclaim
// middleware's options would end `serve` in a stack trace. serve checks the
// options first, with the parsers the middleware, the GC API and the
// reclaimer use themselves, and stops with one line naming the option.

// serveExit is os.Exit, replaced by tests.
var serveExit = os.Exit

func init() { guardServe(distregistry.ServeCmd) }

// guardServe makes serve check the reclaim middleware options before
// Distribution builds the app. A configuration that cannot be read is left
// to upstream, which reports it in its own words.
func guardServe(serve *cobra.Command) {
	prev := serve.PreRun
	serve.PreRun = func(cmd *cobra.Command, args []string) {
		if prev != nil {
			prev(cmd, args)
		}
		path := os.Getenv("REGISTRY_CONFIGURATION_PATH")
		if len(args) > 0 {
			path = args[0]
		}
		if path == "" {
			return
		}
		config, err := readConfig(path)
		if err != nil {
			return
		}
		if err := checkReclaimConfig(config); err != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "registry: %v\n", err)
			serveExit(1)
		}
	}
}

// checkReclaimConfig parses the options of every enabled reclaim storage
// middleware entry of config the way `serve` will: storage.ParseOptions (the
// middleware itself), registry.ParseGCConfig (the GC API) and
// registry.ParseReclaimerConfig (the background reclaimer). The error is
// one line:
//
//	config: middleware reclaim: option "window": must be a positive duration, got -1h0m0s
//	config: middleware reclaim: gc.cap: want a non-negative integer (0 = default), got -1
func checkReclaimConfig(config *configuration.Configuration) error {
	for _, m := range config.Middleware["storage"] {
		if m.Name != storage.MiddlewareName || m.Disabled {
			continue
		}
		if _, err := storage.ParseOptions(m.Options); err != nil {
			var oe *storage.OptionError
			if errors.As(err, &oe) {
				return fmt.Errorf("config: middleware %s: option %q: %v", storage.MiddlewareName, oe.Option, oneLine(oe.Err))
			}
			return fmt.Errorf("config: middleware %s: %v", storage.MiddlewareName, oneLine(err))
		}
		// The registry package's parsers read the gc and reclaimer blocks
		// of the last enabled entry; give them this one alone.
		one := &configuration.Configuration{Middleware: map[string][]configuration.Middleware{"storage": {m}}}
		if _, err := registry.ParseGCConfig(one); err != nil {
			return fmt.Errorf("config: middleware %s: %s", storage.MiddlewareName, strings.TrimPrefix(oneLine(err), "reclaim: "))
		}
		if _, err := registry.ParseReclaimerConfig(one); err != nil {
			return fmt.Errorf("config: middleware %s: %s", storage.MiddlewareName, strings.TrimPrefix(oneLine(err), "reclaim: "))
		}
	}
	// A pull-through cache stores manifests without verifying their
	// references: GC is refused there (storage.CheckProxyGC).
	if err := storage.CheckProxyGC(config); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return nil
}

// oneLine keeps an error on the single line the operator reads.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}
