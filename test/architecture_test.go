// Package test holds the tests that look at the whole program: the
// end-to-end suite (e2e), the soak (soak), and here the guards of its shape.
package test

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/reclaim-registry/reclaim"

// deps returns every package pkg depends on, directly or not.
func deps(t *testing.T, pkg string) map[string]bool {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-json=ImportPath", module+"/"+pkg).Output()
	if err != nil {
		t.Fatalf("go list %s: %v", pkg, err)
	}
	got := map[string]bool{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p struct{ ImportPath string }
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		got[p.ImportPath] = true
	}
	return got
}

// TestDependencies keeps the package graph of docs/architecture.md: the
// words (package reclaim) import only the standard library and go-digest,
// the decision core knows nothing of Redis or HTTP, the link database tools
// run without the registry's handlers, the storage tree is a leaf, the one
// typed configuration depends on nothing it configures, and retention's
// domain knows neither Redis nor HTTP nor the collector.
func TestDependencies(t *testing.T) {
	const (
		redis    = "github.com/redis/go-redis/v9"
		handlers = "github.com/distribution/distribution/v3/registry/handlers"
		mw       = module + "/storage"
	)
	for _, tc := range []struct {
		pkg       string
		forbidden []string
	}{
		{"gc", []string{mw, module + "/storage/tracker", module + "/storage/linkdb", module + "/registry", module + "/retention", redis, handlers}},
		// retention is the domain of pins and the in-use index: no Redis,
		// no HTTP, no storage; its stores are retention/redisdb.
		{"retention", []string{mw, module + "/storage/tracker", module + "/storage/linkdb", module + "/gc", module + "/registry",
			module + "/retention/redisdb", redis, handlers, "net/http"}},
		{"retention/redisdb", []string{mw, module + "/storage/tracker", module + "/storage/linkdb", module + "/gc", module + "/registry", handlers}},
		{"storage/layout", []string{mw, module + "/storage/tracker", module + "/storage/linkdb", module + "/gc", redis, handlers, "github.com/prometheus/client_golang/prometheus"}},
		{"storage/tracker", []string{mw, module + "/storage/linkdb", module + "/gc", module + "/registry", handlers}},
		{"storage/referrers", []string{mw, module + "/storage/tracker", module + "/gc", redis, handlers}},
		{"storage/linkdb", []string{mw, module + "/gc", module + "/registry", handlers}},
		{"storage", []string{module + "/gc", module + "/registry"}},
		{"internal/config", []string{mw, module + "/storage/linkdb", module + "/gc", module + "/registry", handlers}},
		// the cross-site check the GC API and the console share knows
		// only HTTP (and how Distribution names its own URL)
		{"internal/crosssite", []string{mw, module + "/storage/tracker", module + "/storage/linkdb", module + "/gc",
			module + "/registry", module + "/retention", module + "/internal/config", redis, handlers}},
	} {
		got := deps(t, tc.pkg)
		for _, f := range tc.forbidden {
			if got[f] {
				t.Errorf("%s depends on %s", tc.pkg, f)
			}
		}
	}
	// The words are an allow-list: every package imports them, so they
	// import nothing of the project and nothing outside the standard
	// library but go-digest.
	for p := range deps(t, "reclaim") {
		first, _, _ := strings.Cut(p, "/")
		if p != module+"/reclaim" && p != "github.com/opencontainers/go-digest" && strings.Contains(first, ".") {
			t.Errorf("reclaim depends on %s; it may import only the standard library and go-digest", p)
		}
	}
}

// imports returns the packages pkg imports directly.
func imports(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", "{{join .Imports \"\\n\"}}", module+"/"+pkg).Output()
	if err != nil {
		t.Fatalf("go list %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}

// TestGCLayers keeps gc's three layers apart (issue 26): the decision core
// (gc) does no I/O, directly or through anything it imports; the collector
// (and the reclaimer, once it has its own package) may import gc and the
// words, but neither Redis nor the registry.
func TestGCLayers(t *testing.T) {
	// Standard I/O packages: the core must not import them itself (fmt
	// imports os, so a transitive check would forbid everything).
	for _, p := range imports(t, "gc") {
		switch p {
		case "os", "net", "net/http", "io/fs":
			t.Errorf("gc imports %s; the decision core does no I/O", p)
		}
	}
	// Nothing the core depends on, directly or not, may be a storage
	// driver, Distribution's storage interfaces, Redis, or the module's
	// storage and registry packages.
	for p := range deps(t, "gc") {
		switch {
		case p == "github.com/redis/go-redis/v9",
			p == "github.com/distribution/distribution/v3",
			strings.HasPrefix(p, "github.com/distribution/distribution/v3/registry/storage"),
			strings.HasPrefix(p, module+"/storage"),
			strings.HasPrefix(p, module+"/registry"),
			strings.HasPrefix(p, module+"/gc/"):
			t.Errorf("gc depends on %s; the decision core does no I/O", p)
		}
	}
	for _, pkg := range []string{"gc/collector"} {
		for p := range deps(t, pkg) {
			if p == "github.com/redis/go-redis/v9" || strings.HasPrefix(p, module+"/registry") {
				t.Errorf("%s depends on %s", pkg, p)
			}
		}
	}
}
