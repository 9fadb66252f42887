package middleware

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/distribution/distribution/v3/registry/handlers"

	reclaimconfig "github.com/reclaim-registry/reclaim/internal/config"
)

// A pull-through cache stores manifests without verifying them: with GC
// enabled the registry refuses to start.
func TestProxyModeRefusesGC(t *testing.T) {
	config := func(gc, reclaimer bool) *configuration.Configuration {
		cfg := &configuration.Configuration{}
		cfg.Version = "0.1"
		cfg.Log.Level = "error"
		cfg.HTTP.Secret = "s"
		cfg.Storage = configuration.Storage{"inmemory": configuration.Parameters{}}
		cfg.Proxy.RemoteURL = "http://127.0.0.1:1"
		cfg.Middleware = map[string][]configuration.Middleware{"storage": {{Name: MiddlewareName, Options: map[string]any{
			"gc":        map[any]any{"enabled": gc},
			"reclaimer": map[string]any{"enabled": reclaimer},
		}}}}
		return cfg
	}
	for _, tc := range []struct {
		name          string
		gc, reclaimer bool
	}{{"gc", true, false}, {"reclaimer", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := open(context.Background(), config(tc.gc, tc.reclaimer)); !errors.Is(err, reclaimconfig.ErrProxyGC) {
				t.Fatalf("Open: %v, want ErrProxyGC", err)
			}
			// what `registry serve` runs: Distribution turns the
			// middleware's error into a failed start
			var got any
			func() {
				defer func() { got = recover() }()
				handlers.NewApp(context.Background(), config(tc.gc, tc.reclaimer))
			}()
			msg := fmt.Sprint(got)
			if !strings.Contains(msg, reclaimconfig.ErrProxyGC.Error()) || strings.Contains(msg, "\n") {
				t.Fatalf("start: %v, want one line naming ErrProxyGC", got)
			}
			t.Logf("start-up error: %v", msg)
		})
	}
	t.Run("gc off", func(t *testing.T) {
		e, err := open(context.Background(), config(false, false))
		if err != nil {
			t.Fatalf("proxy mode without GC: %v", err)
		}
		e.Close()
	})
}
