package registry

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/distribution/distribution/v3/configuration"

	"github.com/reclaim-registry/reclaim/gc/collector"
	"github.com/reclaim-registry/reclaim/reclaim/gcrun"
)

// consoleScopes serves the console on a registry whose access controller
// grants exactly the X-Scopes of each request (registry/internal/scopetest), with a
// finished run record of team/app (teamRun) and one of other/app
// (otherRun) in its Redis. get sends a request with grant ("" for none).
func consoleScopes(t *testing.T) (get func(method, path, grant string, form url.Values) (*http.Response, string)) {
	t.Helper()
	_, get = consoleServer(t, map[string]any{"window": "1s", "dedup": "10ms", "gc": map[string]any{"enabled": true}})
	return get
}

// consoleServer is consoleScopes on the reclaim options opts, with its
// server.
func consoleServer(t *testing.T, opts map[string]any) (*Server, func(method, path, grant string, form url.Values) (*http.Response, string)) {
	t.Helper()
	conf := serverConfig(opts)
	conf.Auth = configuration.Auth{"gcscopetest": configuration.Parameters{}}
	s, err := New(context.Background(), conf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	for repo, id := range map[string]string{"team/app": teamRun, "other/app": otherRun} {
		rep := &collector.Report{RunID: id, Repository: repo, Status: gcrun.StatusDone, DryRun: true, StartedAt: time.Now(), FinishedAt: time.Now()}
		body, err := json.Marshal(rep)
		if err != nil {
			t.Fatal(err)
		}
		l, err := s.Env().Tracker.BeginRun(t.Context(), repo, id, rep.StartedAt, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		err = l.End(t.Context(), gcrun.StatusDone, body)
		l.Unlock()
		if err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(s.Handler(http.NotFoundHandler()))
	t.Cleanup(srv.Close)
	return s, func(method, path, grant string, form url.Values) (*http.Response, string) {
		var body io.Reader
		if form != nil {
			body = strings.NewReader(form.Encode())
		}
		req, _ := http.NewRequest(method, srv.URL+"/gc/console/"+path, body)
		if form != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		if grant != "" {
			req.Header.Set("X-Scopes", grant)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
}

const (
	teamRun  = "0123456789abcdef0000aaaa"
	otherRun = "0123456789abcdef0000bbbb"
)

// A run's page needs pull on its repository, not the catalog access; the
// lists (catalog access) show a run's id only to a caller who may pull its
// repository, so a catalog-only caller can neither list nor probe ids.
func TestConsoleRunIDsNeedPull(t *testing.T) {
	get := consoleScopes(t)
	const catalog, teamPull = "registry:catalog:*", "repository:team/app:pull"
	for _, tc := range []struct {
		path, grant string
		want        int
	}{
		{"runs/" + teamRun, "", http.StatusUnauthorized},
		{"runs/" + teamRun, teamPull, http.StatusOK},
		{"runs/" + teamRun, catalog, http.StatusNotFound},
		{"runs/" + otherRun, teamPull, http.StatusNotFound},
		{"runs/ffffffffffffffffffffffff", teamPull, http.StatusNotFound},
		{"runs", teamPull, http.StatusUnauthorized},
	} {
		if resp, body := get(http.MethodGet, tc.path, tc.grant, nil); resp.StatusCode != tc.want {
			t.Errorf("GET %s with %q: %d, want %d\n%.300s", tc.path, tc.grant, resp.StatusCode, tc.want, body)
		}
	}
	for _, path := range []string{"", "runs"} {
		for _, tc := range []struct {
			grant       string
			team, other bool
		}{
			{catalog, false, false},
			{catalog + "," + teamPull, true, false},
		} {
			resp, body := get(http.MethodGet, path, tc.grant, nil)
			if resp.StatusCode != http.StatusOK || !strings.Contains(body, "team/app") || !strings.Contains(body, "other/app") {
				t.Fatalf("GET /gc/console/%s with %q: %d, want 200 listing both runs\n%s", path, tc.grant, resp.StatusCode, body)
			}
			if strings.Contains(body, teamRun) != tc.team || strings.Contains(body, otherRun) != tc.other {
				t.Errorf("GET /gc/console/%s with %q shows team/app's id %v, other/app's %v; want %v, %v",
					path, tc.grant, strings.Contains(body, teamRun), strings.Contains(body, otherRun), tc.team, tc.other)
			}
		}
	}
}

// A preview asks who the caller is before it looks at the name: an
// anonymous caller gets the challenge, not a 400.
func TestConsolePreviewAuthenticatesFirst(t *testing.T) {
	get := consoleScopes(t)
	for _, tc := range []struct {
		repo, grant string
		want        int
	}{
		{"Bad Name", "", http.StatusUnauthorized},
		{"team/app", "", http.StatusUnauthorized},
		{"Bad Name", "repository:team/app:pull", http.StatusBadRequest},
		{"team/app", "repository:team/app:pull", http.StatusUnauthorized},
	} {
		resp, body := get(http.MethodPost, "preview", tc.grant, url.Values{"repository": {tc.repo}})
		if resp.StatusCode != tc.want {
			t.Errorf("preview %q with %q: %d, want %d\n%.300s", tc.repo, tc.grant, resp.StatusCode, tc.want, body)
		}
		if tc.want == http.StatusUnauthorized && resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("preview %q with %q: 401 without a challenge", tc.repo, tc.grant)
		}
	}
}
