package registry

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/distribution/distribution/v3/configuration"

	"github.com/reclaim-registry/reclaim/storage"
)

const proxyConfig = `version: 0.1
storage:
  inmemory: {}
proxy:
  remoteurl: http://127.0.0.1:1
middleware:
  storage:
    - name: reclaim
      options:
        gc:
          enabled: %s
`

// `serve` refuses to start a pull-through cache with GC enabled, with one
// error line, before Distribution builds anything.
func TestServeRefusesProxyGC(t *testing.T) {
	dir := t.TempDir()
	write := func(enabled string) string {
		p := filepath.Join(dir, enabled+".yml")
		if err := os.WriteFile(p, []byte(strings.Replace(proxyConfig, "%s", enabled, 1)), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	on := write("true")
	err := checkServeConfig([]string{on})
	if !errors.Is(err, storage.ErrProxyGC) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("serve %s: %v, want one line wrapping storage.ErrProxyGC", on, err)
	}
	t.Logf("start-up error: %v", err)
	t.Setenv("REGISTRY_CONFIGURATION_PATH", on)
	if err := checkServeConfig(nil); !errors.Is(err, storage.ErrProxyGC) {
		t.Fatalf("serve with REGISTRY_CONFIGURATION_PATH: %v", err)
	}
	if err := checkServeConfig([]string{write("false")}); err != nil {
		t.Fatalf("proxy without GC: %v", err)
	}
	if err := checkServeConfig([]string{filepath.Join(dir, "missing.yml")}); err != nil {
		t.Fatalf("unreadable configuration is serve's to report: %v", err)
	}
}

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
