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
		mw       = module + "/storage/middleware"
	)
	for _, tc := range []struct {
		pkg       string
		forbidden []string
	}{
		{"gc", []string{mw, module + "/redisstate", module + "/storage/linkdb", module + "/registry", module + "/retention", redis, handlers}},
		// retention is the domain of pins and the in-use index: no Redis,
		// no HTTP, no storage; its stores are retention/redisstore.
		{"retention", []string{mw, module + "/redisstate", module + "/storage/linkdb", module + "/gc", module + "/registry",
			module + "/retention/redisstore", redis, handlers, "net/http"}},
		{"retention/redisstore", []string{mw, module + "/redisstate", module + "/storage/linkdb", module + "/gc", module + "/registry", handlers}},
		{"storage/layout", []string{mw, module + "/redisstate", module + "/storage/linkdb", module + "/gc", redis, handlers, "github.com/prometheus/client_golang/prometheus"}},
		{"redisstate", []string{mw, module + "/storage/linkdb", module + "/gc", module + "/registry", handlers}},
		{"storage/referrers", []string{mw, module + "/redisstate", module + "/gc", redis, handlers}},
		{"storage/linkdb", []string{mw, module + "/gc", module + "/registry", handlers}},
		{"storage/middleware", []string{module + "/gc", module + "/registry"}},
		{"internal/config", []string{mw, module + "/storage/linkdb", module + "/gc", module + "/registry", handlers}},
		// the cross-site check the GC API and the console share knows
		// only HTTP (and how Distribution names its own URL)
		{"internal/crosssite", []string{mw, module + "/redisstate", module + "/storage/linkdb", module + "/gc",
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
