package gcapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/gc/collector"
	"github.com/reclaim-registry/reclaim/internal/config"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/redisstate/usage"
	"github.com/reclaim-registry/reclaim/registry/accesscontrol"
	_ "github.com/reclaim-registry/reclaim/registry/internal/scopetest" // "gcscopetest": grants a request's X-Scopes
)

// scopeAPI serves the GC API with scopetest's auth, on a collector
// over an in-memory storage that holds team/app (and keeps its usage
// estimates in usage, when given). do sends a request with grant.
func scopeAPI(t *testing.T, store *usage.Store) (do func(method, path, grant string) *http.Response) {
	t.Helper()
	conf := &configuration.Configuration{Auth: configuration.Auth{"gcscopetest": configuration.Parameters{}}}
	d := inmemory.New()
	if err := d.PutContent(context.Background(), "/docker/registry/v2/repositories/team/app/_layers/sha256/"+
		digest.FromString("x").Encoded()+"/link", []byte(digest.FromString("x"))); err != nil {
		t.Fatal(err)
	}
	cfg := collector.Config{Driver: d, Tracker: notRecording{}, Links: noLinks{}}
	b := &Config{}
	if store != nil {
		cfg.Usage, b.Usage = store, store
	}
	col, err := collector.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b.Collector = col
	opts := config.Options{GC: config.GC{Enabled: true}}
	srv := httptest.NewServer(newGCAPI(accesscontrol.New(conf), opts, b, http.NotFoundHandler()))
	t.Cleanup(srv.Close)
	return func(method, path, grant string) *http.Response {
		req, _ := http.NewRequest(method, srv.URL+path, nil)
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
}

// TestCollectRequiresDeleteScope checks which access the API asks the
// configured controller for: delete on the repository to collect, pull on
// the run's repository to read a run.
func TestCollectRequiresDeleteScope(t *testing.T) {
	do := scopeAPI(t, nil)
	const path = "/gc/v1/repositories/team/app/collect?dry_run=true"
	if r := do("POST", path, ""); r.StatusCode != 401 || r.Header.Get("WWW-Authenticate") == "" {
		t.Fatalf("no token: %d", r.StatusCode)
	}
	if r := do("POST", path, "repository:team/app:pull,repository:team/app:push"); r.StatusCode != 401 ||
		!strings.Contains(r.Header.Get("WWW-Authenticate"), "repository:team/app:delete") {
		t.Fatalf("pull+push only: %d %q", r.StatusCode, r.Header.Get("WWW-Authenticate"))
	}
	if r := do("POST", path, "repository:other:delete"); r.StatusCode != 401 {
		t.Fatalf("delete on another repository: %d", r.StatusCode)
	}
	// With delete granted the request gets past auth: the dry run plans
	// (listing the stub tracker's "not recording" as a blocker), a real run
	// aborts.
	if r := do("POST", path, "repository:team/app:delete"); r.StatusCode != http.StatusOK {
		t.Fatalf("delete granted: %d", r.StatusCode)
	}
	if r := do("POST", strings.Replace(path, "dry_run=true", "dry_run=false", 1), "repository:team/app:delete"); r.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("delete granted, real run: %d", r.StatusCode)
	}
	// A name that is invalid is a 400 before any auth question.
	if r := do("POST", "/gc/v1/repositories/Team/collect", ""); r.StatusCode != 400 {
		t.Fatalf("invalid name: %d", r.StatusCode)
	}
}

type notRecording struct{}

func (notRecording) RecordingSince(context.Context) (t0 time.Time, err error) {
	return t0, reclaim.ErrNotRecording
}
func (notRecording) LastAccess(context.Context, reclaim.Object) (time.Time, bool, error) {
	return time.Time{}, false, nil
}
func (notRecording) Fence(context.Context, reclaim.Object, time.Duration, time.Duration) (reclaim.Hold, error) {
	return nil, reclaim.ErrFenced
}
func (notRecording) LockRepository(ctx context.Context, _ string, _ time.Duration) (context.Context, func(), error) {
	return ctx, func() {}, nil
}

type noLinks struct{}

func (noLinks) List(context.Context, digest.Digest) ([]reclaim.RepoLink, error) { return nil, nil }

func (noLinks) ListFor(context.Context, digest.Digest, string) ([]reclaim.RepoLink, error) {
	return nil, nil
}
