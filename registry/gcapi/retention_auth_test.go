package gcapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/distribution/distribution/v3/configuration"
	"github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
	"github.com/opencontainers/go-digest"
	"github.com/redis/go-redis/v9"

	"github.com/reclaim-registry/reclaim/gc/collector"
	"github.com/reclaim-registry/reclaim/internal/config"
	"github.com/reclaim-registry/reclaim/registry/accesscontrol"
	"github.com/reclaim-registry/reclaim/retention"
	"github.com/reclaim-registry/reclaim/retention/pin"
	"github.com/reclaim-registry/reclaim/retention/redisstore"
)

// Pins ask for what a collection asks for (delete on the repository; pull
// to read); the in-use index for the registry-wide catalog scope to read
// and registry:inuse:write to change it. The catalog scope, what a
// read-only catalog browser gets, changes neither.
func TestPinsAndInUseScopes(t *testing.T) {
	conf := &configuration.Configuration{Auth: configuration.Auth{"gcscopetest": configuration.Parameters{}}}
	col, err := collector.New(collector.Config{Driver: inmemory.New(), Tracker: notRecording{}, Links: noLinks{}})
	if err != nil {
		t.Fatal(err)
	}
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer c.Close()
	b := &Config{Collector: col, Pins: redisstore.NewPins(c, "t:", nil), InUse: redisstore.NewInUse(c, "t:"),
		Exists:     func(context.Context, string) (bool, error) { return true, nil },
		HasVersion: func(context.Context, string, pin.Ref) (bool, error) { return true, nil },
		Fenced:     func(context.Context, string, digest.Digest) (bool, error) { return false, nil },
		TagState:   func(context.Context, string, string) (bool, bool, error) { return false, false, nil }}
	srv := httptest.NewServer(newGCAPI(accesscontrol.New(conf), config.Options{GC: config.GC{Enabled: true}}, b, http.NotFoundHandler()))
	defer srv.Close()

	do := func(method, path, body, grant string) *http.Response {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if grant != "" {
			req.Header.Set("X-Scopes", grant)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	pin := "/gc/v1/repositories/team/app/pins/" + digest.FromString("m").String()
	for _, tc := range []struct {
		method, path, body, grant string
		want                      int
		asks                      string
	}{
		{"PUT", pin, "", "", 401, ""},
		{"PUT", pin, "", "repository:team/app:pull,repository:team/app:push", 401, "repository:team/app:delete"},
		{"PUT", pin, "", "repository:team/app:delete", 201, ""},
		{"GET", "/gc/v1/repositories/team/app/pins", "", "repository:other:pull", 401, "repository:team/app:pull"},
		{"GET", "/gc/v1/repositories/team/app/pins", "", "repository:team/app:pull", 200, ""},
		{"DELETE", pin, "", "repository:team/app:pull", 401, "repository:team/app:delete"},
		{"DELETE", pin, "", "repository:team/app:delete", 204, ""},
		{"PUT", pin, "", "registry:catalog:*", 401, "repository:team/app:delete"},
		{"DELETE", pin, "", "registry:catalog:*", 401, "repository:team/app:delete"},
		{"PUT", "/gc/v1/inuse/sources/prod", `{"images":[]}`, "repository:team/app:delete", 401, "registry:inuse:write"},
		{"PUT", "/gc/v1/inuse/sources/prod", `{"images":[]}`, "registry:catalog:*", 401, "registry:inuse:write"},
		{"PUT", "/gc/v1/inuse/sources/prod", `{"images":[]}`, "registry:inuse:write", 200, ""},
		{"GET", "/gc/v1/inuse/sources", "", "repository:team/app:pull", 401, "registry:catalog:*"},
		{"GET", "/gc/v1/inuse/sources", "", "registry:inuse:write", 401, "registry:catalog:*"},
		{"GET", "/gc/v1/inuse/sources", "", "registry:catalog:*", 200, ""},
		{"GET", "/gc/v1/inuse/sources/prod", "", "registry:catalog:*", 200, ""},
		{"DELETE", "/gc/v1/inuse/sources/prod", "", "registry:catalog:*", 401, "registry:inuse:write"},
		{"DELETE", "/gc/v1/inuse/sources/prod", "", "registry:inuse:write", 204, ""},
	} {
		r := do(tc.method, tc.path, tc.body, tc.grant)
		if r.StatusCode != tc.want || !strings.Contains(r.Header.Get("WWW-Authenticate"), tc.asks) {
			t.Errorf("%s %s with %q: %d %q, want %d asking %q", tc.method, tc.path, tc.grant, r.StatusCode,
				r.Header.Get("WWW-Authenticate"), tc.want, tc.asks)
		}
	}
}

// Retention previews and applies need delete on the repository, its plans
// pull, and the registry-wide list of plans the catalog scope.
func TestRetentionScopes(t *testing.T) {
	conf := &configuration.Configuration{Auth: configuration.Auth{"gcscopetest": configuration.Parameters{}}}
	col, err := collector.New(collector.Config{Driver: inmemory.New(), Tracker: notRecording{}, Links: noLinks{}})
	if err != nil {
		t.Fatal(err)
	}
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer c.Close()
	inuse, pins := redisstore.NewInUse(c, "t:"), redisstore.NewPins(c, "t:", nil)
	rb := &Retention{Policy: retention.Policy{Cap: 1, MinAge: 1}, Plans: redisstore.NewPlans(c, "t:", 1e15), PlanMaxAge: 1e12, PlanKeep: 1e15,
		Planner: &retention.Planner{Index: inuse, Pins: pins, MaxAge: 1e12, Now: time.Now}}
	b := &Config{Collector: col, Retention: rb, Exists: func(context.Context, string) (bool, error) { return true, nil }}
	srv := httptest.NewServer(newGCAPI(accesscontrol.New(conf), config.Options{GC: config.GC{Enabled: true}}, b, http.NotFoundHandler()))
	defer srv.Close()
	id := retention.NewPlanID()
	for _, tc := range []struct {
		method, path, grant string
		want                int
		asks                string
	}{
		{"POST", "/gc/v1/repositories/team/app/retention/preview", "repository:team/app:pull", 401, "repository:team/app:delete"},
		{"POST", "/gc/v1/repositories/team/app/retention/preview", "repository:team/app:delete", 503, ""}, // empty index
		{"POST", "/gc/v1/repositories/team/app/retention/plans/" + id + "/apply", "repository:team/app:pull", 401, "repository:team/app:delete"},
		{"POST", "/gc/v1/repositories/team/app/retention/plans/" + id + "/apply", "repository:team/app:delete", 404, ""},
		{"GET", "/gc/v1/repositories/team/app/retention/plans", "repository:other:pull", 401, "repository:team/app:pull"},
		{"GET", "/gc/v1/repositories/team/app/retention/plans", "repository:team/app:pull", 200, ""},
		{"GET", "/gc/v1/repositories/team/app/retention/plans/" + id, "repository:team/app:pull", 404, ""},
		{"GET", "/gc/v1/retention/plans", "repository:team/app:pull", 401, "registry:catalog:*"},
		{"GET", "/gc/v1/retention/plans", "registry:catalog:*", 200, ""},
		{"PUT", "/gc/v1/repositories/team/app/retention/preview", "repository:team/app:delete", 405, ""},
	} {
		req, _ := http.NewRequest(tc.method, srv.URL+tc.path, nil)
		req.Header.Set("X-Scopes", tc.grant)
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != tc.want || !strings.Contains(r.Header.Get("WWW-Authenticate"), tc.asks) {
			t.Errorf("%s %s with %q: %d %q, want %d asking %q", tc.method, tc.path, tc.grant, r.StatusCode,
				r.Header.Get("WWW-Authenticate"), tc.want, tc.asks)
		}
	}
}
