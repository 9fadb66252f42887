package registry

import (
	"context"
	"errors"
	"testing"

	"github.com/distribution/distribution/v3/configuration"

	"github.com/reclaim-registry/reclaim/internal/config"
	"github.com/reclaim-registry/reclaim/storage/middleware"
)

// No collector is built on a pull-through cache, whatever the gc block
// says: the GC API is off there, and so is a reclaimer the sweep command
// asks for with the kill switch forced on.
func TestCollectorRefusesProxy(t *testing.T) {
	cfg := &configuration.Configuration{}
	cfg.Storage = configuration.Storage{"inmemory": configuration.Parameters{}}
	cfg.Proxy.RemoteURL = "http://127.0.0.1:1"
	cfg.Middleware = map[string][]configuration.Middleware{"storage": {{Name: middleware.MiddlewareName}}}
	s, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.gc != nil {
		t.Fatal("a collector on a pull-through cache")
	}
	if _, err := s.NewReclaimer(true); !errors.Is(err, config.ErrProxyGC) {
		t.Fatalf("NewReclaimer: %v, want config.ErrProxyGC", err)
	}
}
