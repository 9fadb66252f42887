package gcapi

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/reclaim-registry/reclaim/gc/collector"
	"github.com/reclaim-registry/reclaim/internal/config"
	"github.com/reclaim-registry/reclaim/redisstate/usage"
	"github.com/reclaim-registry/reclaim/registry/accesscontrol"
)

// TestUsageScopes: a stored estimate needs pull on the repository, a
// refresh delete (it is a dry-run collect), the ranking the catalog scope.
func TestUsageScopes(t *testing.T) {
	do := scopeAPI(t, usage.New(redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()}), ""))
	for _, c := range []struct {
		path, grant string
		status      int
		asked       string // the scope a 401 names
	}{
		{"/gc/v1/repositories/team/app/usage", "", 401, ""},
		{"/gc/v1/repositories/team/app/usage?refresh=true", "repository:team/app:pull", 401, "repository:team/app:delete"},
		{"/gc/v1/repositories/team/app/usage", "repository:other:pull", 401, "repository:team/app:pull"},
		{"/gc/v1/repositories/team/app/usage?refresh=true", "repository:team/app:delete", 200, ""},
		{"/gc/v1/repositories/team/app/usage", "repository:team/app:pull", 200, ""},
		{"/gc/v1/usage", "repository:team/app:pull", 401, "registry:catalog:*"},
		{"/gc/v1/usage?top=5", "registry:catalog:*", 200, ""},
		// a bad name is a 400 before any auth question
		{"/gc/v1/repositories/Team/usage", "", 400, ""},
	} {
		r := do(http.MethodGet, c.path, c.grant)
		if r.StatusCode != c.status || c.asked != "" && !strings.Contains(r.Header.Get("WWW-Authenticate"), c.asked) {
			t.Errorf("GET %s with %q: %d %q; want %d asking for %q", c.path, c.grant, r.StatusCode, r.Header.Get("WWW-Authenticate"), c.status, c.asked)
		}
	}
}

// FuzzUsageRoute: every valid repository name N reaches its own usage at
// N/usage, whatever N ends with (another route's suffix included): the
// answer names N, and no other route answers.
func FuzzUsageRoute(f *testing.F) {
	for _, seed := range []string{"team/app", "x/pins", "x/pins/pins", "y/usage", "y/usage/usage", "z/retention/plans",
		"z/retention/plans/abc/apply", "a/plans/0123456789abcdef01234567/apply", "a/collect", "a/plan", "runs/x", "a/retention/preview"} {
		f.Add(seed)
	}
	store := usage.New(redis.NewClient(&redis.Options{Addr: miniredis.RunT(f).Addr()}), "")
	api := newGCAPI(&accesscontrol.Control{}, config.Options{GC: config.GC{Enabled: true}}, &Config{Usage: store,
		Exists: func(context.Context, string) (bool, error) { return false, nil }}, http.NotFoundHandler())
	f.Fuzz(func(t *testing.T, name string) {
		if ValidateRepository(name) != nil {
			return
		}
		w := httptest.NewRecorder()
		api.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/gc/v1/repositories/"+name+"/usage", nil))
		want := fmt.Sprintf("%s: %s", collector.ErrRepositoryNotFound, name)
		if w.Code != http.StatusNotFound || !strings.Contains(w.Body.String(), `"NAME_UNKNOWN"`) || !strings.Contains(w.Body.String(), want+`"`) {
			t.Fatalf("GET %s/usage: %d %s; want 404 NAME_UNKNOWN for %q", name, w.Code, w.Body.String(), name)
		}
	})
}
