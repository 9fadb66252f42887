package gcapi

import (
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v2"
)

// Every endpoint docs/openapi.yaml documents is a route, with the same
// methods, and every route is documented.
func TestRoutesMatchOpenAPI(t *testing.T) {
	raw, err := os.ReadFile("../../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]any `yaml:"paths"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	documented := map[string][]string{}
	for p, ops := range doc.Paths {
		if !strings.HasPrefix(p, gcPrefix) {
			continue
		}
		for op := range ops {
			if m := strings.ToUpper(op); slices.Contains([]string{http.MethodGet, http.MethodPut, http.MethodPost, http.MethodDelete,
				http.MethodHead, http.MethodPatch, http.MethodOptions}, m) {
				documented[p] = append(documented[p], m)
			}
		}
	}
	if len(documented) < 10 {
		t.Fatalf("docs/openapi.yaml: only %d /gc/v1 paths read", len(documented))
	}
	routed := map[string][]string{}
	for _, rt := range routes {
		if rt.path == "" {
			if rt.serve != nil {
				t.Errorf("route %s serves, but has no documented path", rt.pattern)
			}
			continue
		}
		if rt.serve == nil || rt.scope == "" {
			t.Errorf("route %s: no handler or no scope", rt.path)
		}
		for _, m := range rt.methods {
			if !slices.Contains(routed[rt.path], m) {
				routed[rt.path] = append(routed[rt.path], m)
			}
		}
	}
	for p, ms := range documented {
		slices.Sort(ms)
		got := slices.Sorted(slices.Values(routed[p]))
		if !slices.Equal(ms, got) {
			t.Errorf("%s: docs/openapi.yaml documents %v, the routes serve %v", p, ms, got)
		}
	}
	for p, ms := range routed {
		if documented[p] == nil {
			t.Errorf("route %s %v is not in docs/openapi.yaml", p, ms)
		}
	}
}

// A request reaches the route its documented path names: each documented
// path, with its parameters filled in, is matched by its own route for
// each method it serves.
func TestRoutesTakeTheirPaths(t *testing.T) {
	fill := strings.NewReplacer("{name}", "team/app", "{id}", "0123456789abcdef01234567", "{ref}", "v1", "{source}", "deploys")
	for _, rt := range routes {
		if rt.path == "" {
			continue
		}
		for _, m := range rt.methods {
			got, _, err := match(m, fill.Replace(rt.path))
			if err != nil || got == nil || got.path != rt.path {
				t.Errorf("%s %s: routed to %+v (%v)", m, rt.path, got, err)
			}
		}
	}
	if _, _, err := match(http.MethodGet, gcPrefix+"nothing"); err == nil || !strings.Contains(err.Error(), errNotFound.Error()) {
		t.Errorf("an unknown endpoint: %v, want not found", err)
	}
}
