package registry

import (
	"net/http"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/reclaim-registry/reclaim/storage/tracker"
)

// TestUsageScopes: a stored estimate needs pull on the repository, a
// refresh delete (it is a dry-run collect), the ranking the catalog scope.
func TestUsageScopes(t *testing.T) {
	do := scopeAPI(t, tracker.NewUsageStore(redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()}), ""))
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
