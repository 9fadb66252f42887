package registry

import (
	"context"
	"strings"
	"testing"

	"github.com/distribution/distribution/v3/configuration"

	"github.com/reclaim-registry/reclaim/internal/config"
	"github.com/reclaim-registry/reclaim/registry/gcapi"
)

func serverConfig(options map[string]any) *configuration.Configuration {
	conf := &configuration.Configuration{}
	conf.Storage = configuration.Storage{"inmemory": configuration.Parameters{}}
	if options != nil {
		conf.Middleware = map[string][]configuration.Middleware{"storage": {{Name: config.MiddlewareName, Options: options}}}
	}
	return conf
}

// New builds what the configuration enables and nothing more; Start runs a
// reclaimer only when it is enabled, and Close may be called twice.
func TestNewBuildsWhatIsEnabled(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name                string
		options             map[string]any
		env, api, reclaimer bool
	}{
		{"no middleware", nil, false, false, false},
		{"middleware", map[string]any{}, true, false, false},
		{"gc API", map[string]any{"gc": map[string]any{"enabled": true}}, true, true, false},
		{"reclaimer", map[string]any{"reclaimer": map[string]any{"enabled": true, "interval": "1h"}}, true, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(ctx, serverConfig(tc.options))
			if err != nil {
				t.Fatal(err)
			}
			api := gcapi.New(s.gcConfig(nil))
			if (s.Env() != nil) != tc.env || (api.Collector() != nil) != tc.api || (s.reclaimer != nil) != tc.reclaimer {
				t.Fatalf("env %v, GC API %v, reclaimer %v", s.Env() != nil, api.Collector() != nil, s.reclaimer != nil)
			}
			s.Start()
			if (s.stop != nil) != tc.reclaimer {
				t.Fatalf("reclaimer running: %v", s.stop != nil)
			}
			s.Close()
			s.Close()
		})
	}
}

func TestNewRefusesBadOptions(t *testing.T) {
	_, err := New(context.Background(), serverConfig(map[string]any{"gc": map[string]any{"cap": -1}}))
	if err == nil || !strings.Contains(err.Error(), `option "gc.cap"`) {
		t.Fatalf("New: %v, want the gc.cap option named", err)
	}
}

func TestNewReclaimerNeedsTheMiddleware(t *testing.T) {
	s, err := New(context.Background(), serverConfig(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.NewReclaimer(true); err == nil || !strings.Contains(err.Error(), "not configured") {
		t.Fatalf("NewReclaimer without the middleware: %v", err)
	}
}
