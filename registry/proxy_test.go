package registry

import (
	"context"
	"errors"
	"testing"

	"github.com/distribution/distribution/v3/configuration"

	"github.com/reclaim-registry/reclaim/storage"
)

// No collector is built on a pull-through cache, whatever the gc block
// says (the sweep command builds one with the kill switch forced on).
func TestCollectorRefusesProxy(t *testing.T) {
	cfg := &configuration.Configuration{}
	cfg.Storage = configuration.Storage{"inmemory": configuration.Parameters{}}
	cfg.Proxy.RemoteURL = "http://127.0.0.1:1"
	cfg.Middleware = map[string][]configuration.Middleware{"storage": {{Name: storage.MiddlewareName}}}
	if _, err := openStorageGC(context.Background(), cfg, GCConfig{}); !errors.Is(err, storage.ErrProxyGC) {
		t.Fatalf("openStorageGC: %v, want storage.ErrProxyGC", err)
	}
}
