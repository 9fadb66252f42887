package console_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/reclaim-registry/reclaim/gc/collector"
	"github.com/reclaim-registry/reclaim/reclaim/gcrun"
	"github.com/reclaim-registry/reclaim/registry/console"
)

// When the run records all instances share cannot be read, the run lists
// say so and show this instance's runs, and a run's page answers 503 with
// the reason, not "not found".
func TestConsoleSharedRunsUnreadable(t *testing.T) {
	down := errors.New("dial tcp 127.0.0.1:6379: connection refused")
	mine := &collector.Report{RunID: "mine", Repository: "team/app", Status: gcrun.StatusDone}
	h := console.New(console.Config{
		Authorize: func(*http.Request, string, console.Access) error { return nil },
		Deny: func(w http.ResponseWriter, _ *http.Request, err error) {
			http.Error(w, err.Error(), http.StatusForbidden)
		},
		Overview:     func(context.Context) console.Overview { return console.Overview{GCEnabled: true} },
		Runs:         func(context.Context) ([]*collector.Report, error) { return []*collector.Report{mine}, down },
		Run:          func(context.Context, string) (*collector.Report, bool, error) { return nil, false, down },
		Repositories: func(context.Context, string, int) ([]string, error) { return nil, nil },
		Validate:     func(string) error { return nil },
		Preview:      func(context.Context, string) (*collector.Report, error) { return nil, nil },
	}, http.NotFoundHandler())
	for _, c := range []struct {
		path string
		code int
		want []string
	}{
		{console.Prefix, http.StatusOK, []string{"Only this instance&#39;s runs are listed", "connection refused", "team/app"}},
		{console.Prefix + "runs", http.StatusOK, []string{"Only this instance&#39;s runs are listed", "team/app"}},
		{console.Prefix + "runs/someid", http.StatusServiceUnavailable, []string{"could not be read", "connection refused"}},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, c.path, nil))
		body, _ := io.ReadAll(rec.Body)
		if rec.Code != c.code {
			t.Errorf("GET %s: %d, want %d\n%s", c.path, rec.Code, c.code, body)
		}
		for _, w := range c.want {
			if !strings.Contains(string(body), w) {
				t.Errorf("GET %s does not say %q", c.path, w)
			}
		}
	}
}
