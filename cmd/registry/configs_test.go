package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/distribution/distribution/v3/configuration"

	"github.com/reclaim-registry/reclaim/internal/config"
)

// shippedConfigs parses every config under configs/ the way `serve` does,
// without the test environment's REGISTRY_* overrides.
func shippedConfigs(t *testing.T) map[string]*configuration.Configuration {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "REGISTRY_") {
			t.Setenv(k, "") // restored after the test
			os.Unsetenv(k)
		}
	}
	paths, err := filepath.Glob("../../configs/*.yml")
	if err != nil {
		t.Fatal(err)
	}
	more, err := filepath.Glob("../../configs/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	paths = append(paths, more...)
	if len(paths) == 0 {
		t.Fatal("no config found under configs/")
	}
	out := map[string]*configuration.Configuration{}
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		config, err := configuration.Parse(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		out[filepath.Base(p)] = config
	}
	return out
}

// The debug listener serves /metrics, /debug/pprof/* and /debug/vars with
// no authentication: every shipped config must keep it on loopback (or
// leave it off). docs/operations.md says how to scrape metrics anyway.
func TestShippedConfigsKeepDebugListenerOnLoopback(t *testing.T) {
	for name, config := range shippedConfigs(t) {
		addr := config.HTTP.Debug.Addr
		if addr == "" {
			continue
		}
		if !isLoopbackAddr(addr) {
			t.Errorf("configs/%s: http.debug.addr %q is not a loopback address: it would expose pprof and metrics without authentication", name, addr)
		}
	}
}

func isLoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func TestIsLoopbackAddr(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:5001": true, "localhost:5001": true, "[::1]:5001": true, "127.0.0.2:5001": true,
		":5001": false, "0.0.0.0:5001": false, "[::]:5001": false, "10.0.0.1:5001": false,
		"example.com:5001": false, "127.0.0.1": false,
	} {
		if got := isLoopbackAddr(addr); got != want {
			t.Errorf("isLoopbackAddr(%q) = %v, want %v", addr, got, want)
		}
	}
}

// What `serve` checks before it starts, every shipped config passes.
func TestShippedConfigsPassTheReclaimCheck(t *testing.T) {
	for name, conf := range shippedConfigs(t) {
		if _, _, err := config.Load(conf); err != nil {
			t.Errorf("configs/%s: %v", name, err)
		}
	}
}
