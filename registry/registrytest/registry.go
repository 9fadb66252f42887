package registrytest

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/distribution/distribution/v3/registry/handlers"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/sirupsen/logrus"

	// The in-process app finds the storage driver and the access controller
	// only through their init registration: filesystem is what every test
	// registry stores into, htpasswd is what WithHtpasswd configures.
	_ "github.com/distribution/distribution/v3/registry/auth/htpasswd"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"

	reclaim "github.com/reclaim-registry/reclaim/registry"
)

// Registry is a running registry under test.
type Registry struct {
	// URL is the base URL, "http://127.0.0.1:<port>", without a trailing slash.
	URL string
	// Host is URL's host and port: the registry part of an image reference.
	Host string
	// Root is the filesystem storage root (rootdirectory).
	Root string
	// Config is the configuration the registry was started with.
	Config *configuration.Configuration
	// Username and Password are the first WithHtpasswd user, empty without auth.
	Username, Password string
	// Server is the in-process Reclaim server (Start); nil for StartProcess.
	Server *reclaim.Server

	serving *inFlight // Start's requests in flight
}

// Ref parses "repo:tag" or "repo@sha256:..." as a reference on this registry.
func (r *Registry) Ref(t testing.TB, ref string) name.Reference {
	t.Helper()
	return onRegistry(t, r, name.ParseReference, "reference", ref)
}

// Repo parses a repository name on this registry.
func (r *Registry) Repo(t testing.TB, repo string) name.Repository {
	t.Helper()
	return onRegistry(t, r, name.NewRepository, "repository", repo)
}

// onRegistry parses s as a name on r's host with parse, failing the test
// with what s was to be when it is not one.
func onRegistry[T any](t testing.TB, r *Registry, parse func(string, ...name.Option) (T, error), what, s string) T {
	t.Helper()
	parsed, err := parse(r.Host+"/"+s, name.Insecure, name.StrictValidation)
	if err != nil {
		t.Fatalf("registrytest: %s %q: %v", what, s, err)
	}
	return parsed
}

// Auth returns the credentials the client helpers use: the first htpasswd
// user, or anonymous.
func (r *Registry) Auth() authn.Authenticator {
	if r.Username == "" {
		return authn.Anonymous
	}
	return &authn.Basic{Username: r.Username, Password: r.Password}
}

// Remote returns go-containerregistry options for talking to this registry
// as r.Auth(), bound to the test's context.
func (r *Registry) Remote(t testing.TB) []remote.Option {
	return []remote.Option{remote.WithAuth(r.Auth()), remote.WithContext(t.Context())}
}

// Do sends a raw request to path (which starts with "/v2/" or "/gc/") with
// r's credentials. The caller closes the body.
func (r *Registry) Do(t testing.TB, method, path string, header http.Header) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, r.URL+path, nil)
	if err != nil {
		t.Fatalf("registrytest: %s %s: %v", method, path, err)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	if r.Username != "" {
		req.SetBasicAuth(r.Username, r.Password)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("registrytest: %s %s: %v", method, path, err)
	}
	return resp
}

// Start runs a registry in this process the way `registry serve` does:
// registry.New for the configuration built from opts, then Distribution's
// handlers.App for it, wrapped by the Server's Handler and served by
// httptest on a loopback port, and the background reclaimer started.
// Storage is a fresh t.TempDir unless WithRootDirectory says otherwise.
// t.Cleanup stops it.
//
// It does not use upstream's NewRegistry, which registers process-wide health
// checks and can run only once per process, and it turns the Prometheus
// instrumentation off for the same reason: the collectors are process-wide,
// and a second app would panic registering them again. Use StartProcess to
// test the serve command itself.
func Start(t testing.TB, opts ...Option) *Registry {
	t.Helper()
	quietLogs()
	s := newSettings(t, opts)
	cfg := s.config(t)
	cfg.HTTP.Debug.Prometheus.Enabled = false

	ctx, cancel := context.WithCancel(context.Background())
	server, err := reclaim.New(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatalf("registrytest: start registry: %v", err)
	}
	app, err := newApp(ctx, cfg)
	if err != nil {
		server.Close()
		cancel()
		t.Fatalf("registrytest: start registry: %v", err)
	}
	server.Start()
	serving := newInFlight()
	srv := httptest.NewServer(serving.wrap(server.Handler(app)))
	t.Cleanup(func() {
		srv.Close()
		if err := app.Shutdown(); err != nil {
			t.Errorf("registrytest: shut down registry: %v", err)
		}
		server.Close()
		cancel()
	})
	r := newRegistry(srv.URL, s, cfg)
	r.Server, r.serving = server, serving
	return r
}

// idleTimeout bounds WaitIdle: a request still running after it is stuck.
const idleTimeout = 30 * time.Second

// WaitIdle waits until r (Start) serves no request, those whose client
// went away included: what a handler does after its client is gone is
// done when it returns.
func (r *Registry) WaitIdle(t testing.TB) {
	t.Helper()
	if r.serving == nil {
		t.Fatal("registrytest: WaitIdle needs a registry from Start")
	}
	select {
	case <-r.serving.idle():
	case <-time.After(idleTimeout):
		t.Fatalf("registrytest: requests still running after %v", idleTimeout)
	}
}

// inFlight counts the requests a handler is serving.
type inFlight struct {
	mu   sync.Mutex
	n    int
	zero chan struct{} // closed while n == 0
}

func newInFlight() *inFlight {
	z := make(chan struct{})
	close(z)
	return &inFlight{zero: z}
}

func (f *inFlight) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		f.mu.Lock()
		if f.n == 0 {
			f.zero = make(chan struct{})
		}
		f.n++
		f.mu.Unlock()
		defer func() {
			f.mu.Lock()
			if f.n--; f.n == 0 {
				close(f.zero)
			}
			f.mu.Unlock()
		}()
		h.ServeHTTP(w, req)
	})
}

func (f *inFlight) idle() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.zero
}

func newRegistry(url string, s *settings, cfg *configuration.Configuration) *Registry {
	r := &Registry{
		URL:    url,
		Host:   strings.TrimPrefix(url, "http://"),
		Root:   s.root,
		Config: cfg,
	}
	if len(s.users) > 0 {
		r.Username, r.Password = s.users[0].name, s.users[0].password
	}
	return r
}

// newApp turns NewApp's panics (its way of reporting a bad configuration)
// into an error.
func newApp(ctx context.Context, cfg *configuration.Configuration) (app *handlers.App, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("invalid configuration: %v", p)
		}
	}()
	return handlers.NewApp(ctx, cfg), nil
}

var quietOnce sync.Once

// quietLogs silences Distribution's process-wide logrus logger for
// in-process registries: it logs every 4xx a client provokes on purpose (a
// HEAD before an upload, a 404 a test asserts) at error level, which would
// bury a failing test's own output. RECLAIM_TEST_LOG=info (or debug, error)
// brings the logs back.
func quietLogs() {
	quietOnce.Do(func() {
		level := logrus.FatalLevel
		if v := os.Getenv("RECLAIM_TEST_LOG"); v != "" {
			if l, err := logrus.ParseLevel(v); err == nil {
				level = l
			}
		}
		logrus.SetLevel(level)
	})
}
