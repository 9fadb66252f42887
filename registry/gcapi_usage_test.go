package registry

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/distribution/distribution/v3/configuration"
	"github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
	"github.com/opencontainers/go-digest"
	"github.com/redis/go-redis/v9"

	"github.com/reclaim-registry/reclaim/gc"
	"github.com/reclaim-registry/reclaim/internal/config"
	"github.com/reclaim-registry/reclaim/storage/tracker"
)

// TestUsageScopes: a stored estimate needs pull on the repository, a
// refresh delete (it is a dry-run collect), the ranking the catalog scope.
func TestUsageScopes(t *testing.T) {
	conf := &configuration.Configuration{Auth: configuration.Auth{"gcscopetest": configuration.Parameters{}}}
	d := inmemory.New()
	if err := d.PutContent(context.Background(), "/docker/registry/v2/repositories/team/app/_layers/sha256/"+
		digest.FromString("x").Encoded()+"/link", []byte(digest.FromString("x"))); err != nil {
		t.Fatal(err)
	}
	store := tracker.NewUsageStore(redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()}), "")
	col, err := gc.New(gc.Config{Driver: d, Tracker: notRecording{}, Links: noLinks{}, Usage: store})
	if err != nil {
		t.Fatal(err)
	}
	opts := config.Options{GC: config.GC{Enabled: true}}
	srv := httptest.NewServer(newGCAPI(newAccessControl(conf), opts, &gcBackend{Collector: col, Usage: store}, http.NotFoundHandler()))
	defer srv.Close()
	do := func(path, grant string) *http.Response {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
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
		r := do(c.path, c.grant)
		if r.StatusCode != c.status || c.asked != "" && !strings.Contains(r.Header.Get("WWW-Authenticate"), c.asked) {
			t.Errorf("GET %s with %q: %d %q; want %d asking for %q", c.path, c.grant, r.StatusCode, r.Header.Get("WWW-Authenticate"), c.status, c.asked)
		}
	}
}
