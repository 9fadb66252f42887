// Package test holds the tests that look at the whole program: the
// end-to-end suite (e2e), the soak (soak), and here the guards of its shape.
package test

import (
	"encoding/json"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/reclaim-registry/reclaim"

// allowed is the package graph of docs/architecture.md, as an allow-list:
// for every package of the module (paths relative to the module), the
// module packages its non-test code may import. A package that is not a
// key fails TestDependencies until it is added here, with its edges; an
// edge that is not listed fails it too. Imports point down: nothing here
// lists a package that imports it back.
var allowed = map[string][]string{
	// the words every package speaks
	"reclaim": {"internal/enum"},
	// the words of one GC run: status, step, progress, state, handle
	"reclaim/gcrun": {"reclaim"},
	// the words of recoverable deletion: a trash entry, a restore's outcome
	"reclaim/trashentry": {"internal/enum", "reclaim"},

	// small helpers, importing nothing of the project
	"internal/config":    {}, // one typed configuration: depends on nothing it configures
	"internal/crosssite": {},
	"internal/enum":      {}, // the one shape of a closed set of words
	"internal/metrics":   {},
	"internal/pause":     {}, // the wait of every retry, poll and interval loop
	"internal/rlog":      {},

	// the storage tree, the referrers index and the link database
	"storage/layout":                        {"reclaim"},
	"storage/referrers":                     {"storage/layout"},
	"storage/linkdb":                        {"internal/enum", "internal/pause", "reclaim", "redisstate", "storage/layout", "storage/referrers"},
	"storage/linkdb/internal/gen":           {"reclaim", "storage/layout", "storage/referrers"},
	"storage/linkdb/internal/gen/linkdbgen": {"storage/linkdb/internal/gen"},
	"storage/storagetest":                   {"storage/storagetest/redistest"},
	"storage/storagetest/redistest":         {},
	"storage/storagetest/s3test":            {},
	// GC's storage budget: a driver wrapper, knows no Redis and no layout
	"storage/budget": {"internal/metrics", "internal/pause"},

	// every piece of Redis state
	"redisstate": {"internal/enum", "internal/metrics", "internal/pause", "internal/rlog", "reclaim", "reclaim/gcrun", "redisstate/due", "storage/layout"},
	// the one shape of a work list in Redis (claim with a lease, done by compare)
	"redisstate/due": {},
	// the reclaimable-bytes estimates and their rankings: read by the GC
	// API, written by collects and the reclaimer's refresh, never by GC's decisions
	"redisstate/usage": {"reclaim", "redisstate/due"},
	// retention's record of manifest pulls: written by the middleware,
	// read by retention, never by GC
	"redisstate/pulls": {"reclaim"},

	// the storage-driver middleware, its Env and request scope
	"storage/middleware": {"internal/config", "internal/metrics", "internal/pause", "internal/rlog", "reclaim", "redisstate", "redisstate/pulls",
		"storage/budget", "storage/layout", "storage/linkdb", "storage/referrers"},

	// garbage collection: the pure decision, a run's I/O around it, and
	// the background reclaimer on the collector's deletion step
	"gc":           {"reclaim"},
	"gc/collector": {"gc", "internal/pause", "reclaim", "reclaim/gcrun", "reclaim/trashentry", "storage/layout"},
	"gc/reclaimer": {"gc", "gc/collector", "internal/pause", "reclaim", "storage/layout"},
	// the fixtures the collector's and the reclaimer's tests share
	"gc/internal/gctest": {"internal/config", "reclaim", "storage/layout", "storage/linkdb", "storage/middleware", "storage/storagetest"},

	// retention: the domain, and its state in Redis
	// recoverable deletion: holds on blobs, their Redis index, restore, purge
	"trash": {"gc", "internal/pause", "reclaim", "reclaim/trashentry", "redisstate", "storage/layout", "storage/referrers"},

	"retention":            {"internal/enum", "reclaim", "retention/inuse", "retention/pin"},
	"retention/inuse":      {},
	"retention/pin":        {}, // pins: the words and their validation
	"retention/redisstore": {"retention", "retention/inuse", "retention/pin"},

	// HTTP, and the binary
	// registry: the Server, and wire.go, which builds everything below
	"registry": {"gc", "gc/collector", "gc/reclaimer", "internal/config", "internal/metrics", "internal/pause", "reclaim", "reclaim/trashentry",
		"redisstate", "redisstate/usage", "registry/accesscontrol", "registry/console", "registry/deletionevents", "registry/gcapi", "retention",
		"retention/pin", "retention/redisstore", "storage/budget", "storage/layout", "storage/linkdb", "storage/middleware", "storage/referrers", "trash"},
	// the GC API: handlers, route table, error table; no storage, no driver stack
	"registry/gcapi": {"gc/collector", "internal/config", "internal/crosssite", "internal/metrics", "reclaim", "reclaim/gcrun", "reclaim/trashentry",
		"redisstate", "redisstate/usage", "registry/accesscontrol", "retention", "retention/inuse", "retention/pin", "retention/redisstore", "trash"},
	"registry/accesscontrol": {},
	// deletion events: what runs deleted, to Distribution's notification endpoints
	"registry/deletionevents":     {"reclaim"},
	"registry/internal/scopetest": {}, // tests' access controller (test imports only)
	"registry/console":            {"gc", "gc/collector", "gc/reclaimer", "internal/crosssite", "reclaim", "reclaim/gcrun", "reclaim/trashentry"},
	"registry/registrytest":       {"internal/config", "registry", "storage/storagetest"},
	"cmd/registry": {"gc", "gc/collector", "gc/reclaimer", "internal/config", "internal/pause", "reclaim", "reclaim/trashentry", "redisstate",
		"registry", "retention", "retention/inuse", "storage/budget", "storage/layout", "storage/linkdb", "storage/middleware"},

	// whole-program tests (test files only)
	"test":      {},
	"test/e2e":  {},
	"test/soak": {},
}

// pkg is what go list says of one package of the module.
type pkg struct {
	ImportPath string
	Imports    []string // direct imports of its non-test files
	Deps       []string // everything it depends on, directly or not
}

// listModule returns every package of the module, by path relative to it.
func listModule(t *testing.T) map[string]pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports,Deps", "./...")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./...: %v", err)
	}
	pkgs := map[string]pkg{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		rel, ok := strings.CutPrefix(p.ImportPath, module+"/")
		if !ok {
			t.Fatalf("go list ./...: %s is outside the module", p.ImportPath)
		}
		pkgs[rel] = p
	}
	return pkgs
}

// TestDependencies keeps the package graph of docs/architecture.md: every
// import between the module's packages is one the allow-list names; then
// the rules on what each may depend on at all, directly or not.
func TestDependencies(t *testing.T) {
	pkgs := listModule(t)
	for _, rel := range slices.Sorted(maps.Keys(pkgs)) {
		p := pkgs[rel]
		may, ok := allowed[rel]
		if !ok {
			t.Errorf("package %s is not in the allow-list: add it to allowed in test/architecture_test.go "+
				"with the module packages it may import, and draw it in docs/architecture.md", rel)
			continue
		}
		for _, imp := range p.Imports {
			to, ours := strings.CutPrefix(imp, module+"/")
			if ours && !slices.Contains(may, to) {
				t.Errorf("%s imports %s, which the allow-list does not let it (test/architecture_test.go)", rel, to)
			}
		}
	}
	for _, rel := range slices.Sorted(maps.Keys(allowed)) {
		if _, ok := pkgs[rel]; !ok {
			t.Errorf("the allow-list names %s, which is no package of the module: remove or rename it", rel)
		}
	}
	checkForbidden(t, pkgs)
	checkWords(t, pkgs["reclaim"])
}

// checkForbidden holds the rules on everything a package depends on,
// directly or not, the module's packages and the outside world alike: the
// decision core knows nothing of Redis or HTTP, the link database tools run
// without the registry's handlers, the storage tree is a leaf, the one
// typed configuration depends on nothing it configures, retention's
// domain knows neither Redis nor HTTP nor the collector, and the GC API
// opens no storage.
func checkForbidden(t *testing.T, pkgs map[string]pkg) {
	const (
		redis    = "github.com/redis/go-redis/v9"
		handlers = "github.com/distribution/distribution/v3/registry/handlers"
		prom     = "github.com/prometheus/client_golang/prometheus"
	)
	our := func(rel ...string) []string {
		out := make([]string, len(rel))
		for i, r := range rel {
			out[i] = module + "/" + r
		}
		return out
	}
	for _, tc := range []struct {
		pkg       string
		forbidden []string
	}{
		{"gc", append(our("storage/middleware", "redisstate", "storage/linkdb", "registry", "retention"), redis, handlers)},
		// retention is the domain of pins and the in-use index: no Redis,
		// no HTTP, no storage; its stores are retention/redisstore.
		{"retention", append(our("storage/middleware", "redisstate", "storage/linkdb", "gc", "registry", "retention/redisstore"),
			redis, handlers, "net/http")},
		// the in-use scanner reads files, nothing else of the project
		{"retention/inuse", append(our("storage/middleware", "redisstate", "storage/linkdb", "gc", "registry", "retention", "reclaim"),
			redis, handlers, "net/http")},
		// pins are words and their validation: no I/O at all
		{"retention/pin", append(our("storage/middleware", "redisstate", "storage/linkdb", "gc", "registry", "retention", "reclaim"),
			redis, handlers, "net/http")},
		{"retention/redisstore", append(our("storage/middleware", "redisstate", "storage/linkdb", "gc", "registry"), handlers)},
		{"storage/layout", append(our("storage/middleware", "redisstate", "storage/linkdb", "gc"), redis, handlers, prom)},
		{"redisstate", append(our("storage/middleware", "storage/linkdb", "gc", "registry"), handlers)},
		{"storage/referrers", append(our("storage/middleware", "redisstate", "gc"), redis, handlers)},
		{"storage/linkdb", append(our("storage/middleware", "gc", "registry"), handlers)},
		{"storage/middleware", our("gc", "gc/collector", "registry")},
		{"internal/config", append(our("storage/middleware", "redisstate", "storage/linkdb", "gc", "registry"), handlers)},
		// the GC API serves what registry/wire.go hands it: it opens no
		// storage (no middleware, no link database, no driver stack) and
		// builds no app
		{"registry/gcapi", append(our("storage/middleware", "storage/linkdb", "registry"),
			handlers, "github.com/distribution/distribution/v3/registry/storage/driver/factory")},
		// the cross-site check the GC API and the console share knows
		// only HTTP (and how Distribution names its own URL)
		{"internal/crosssite", append(our("storage/middleware", "redisstate", "storage/linkdb", "gc", "registry", "retention",
			"internal/config"), redis, handlers)},
	} {
		p, ok := pkgs[tc.pkg]
		if !ok {
			t.Errorf("rule for %s: no such package", tc.pkg)
			continue
		}
		for _, f := range tc.forbidden {
			if slices.Contains(p.Deps, f) {
				t.Errorf("%s depends on %s", tc.pkg, f)
			}
		}
	}
}

// checkWords: the words are an allow-list of their own. Every package
// imports them, so they import nothing of the project but internal/enum
// (the shape of their closed sets) and nothing outside the standard
// library but go-digest.
func checkWords(t *testing.T, words pkg) {
	if words.ImportPath == "" {
		t.Fatal("no package reclaim")
	}
	for _, p := range words.Deps {
		first, _, _ := strings.Cut(p, "/")
		if p != "github.com/opencontainers/go-digest" && p != module+"/internal/enum" && strings.Contains(first, ".") {
			t.Errorf("reclaim depends on %s; it may import only the standard library, go-digest and internal/enum", p)
		}
	}
}

// TestGCLayers keeps gc's three layers apart (issue 26): the decision core
// (gc) does no I/O, directly or through anything it imports; the collector
// and the reclaimer may import gc and the words, but neither Redis nor the
// registry.
func TestGCLayers(t *testing.T) {
	pkgs := listModule(t)
	// Standard I/O packages: the core must not import them itself (fmt
	// imports os, so a transitive check would forbid everything).
	for _, p := range pkgs["gc"].Imports {
		switch p {
		case "os", "net", "net/http", "io/fs":
			t.Errorf("gc imports %s; the decision core does no I/O", p)
		}
	}
	// Nothing the core depends on, directly or not, may be a storage
	// driver, Distribution's storage interfaces, Redis, or the module's
	// storage and registry packages.
	for _, p := range pkgs["gc"].Deps {
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
	for _, pkg := range []string{"gc/collector", "gc/reclaimer"} {
		for _, p := range pkgs[pkg].Deps {
			if p == "github.com/redis/go-redis/v9" || strings.HasPrefix(p, module+"/registry") {
				t.Errorf("%s depends on %s", pkg, p)
			}
		}
	}
}
