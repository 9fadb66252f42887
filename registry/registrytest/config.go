package registrytest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/distribution/distribution/v3/configuration"
	"golang.org/x/crypto/bcrypt"
)

// httpSecret signs upload state. Every registry this package starts uses the
// same one, so an upload begun on one instance can be finished on another
// that shares its storage root, as in a real multi-instance deployment.
const httpSecret = "registrytest-http-secret"

// Option changes the configuration of a registry started by Start or
// StartProcess.
type Option func(*settings)

type settings struct {
	root       string
	middleware []configuration.Middleware
	users      []user
	redisAddr  string
	edits      []func(*configuration.Configuration)
}

type user struct{ name, password string }

// WithRootDirectory stores data under dir instead of a fresh t.TempDir. Two
// registries given the same dir share one storage, like two instances of a
// deployment behind a load balancer.
func WithRootDirectory(dir string) Option {
	return func(s *settings) { s.root = dir }
}

// WithStorageMiddleware appends an entry to the config's
// `middleware: storage:` list, e.g. WithStorageMiddleware("reclaim",
// map[string]any{"redis": map[string]any{"addrs": []string{addr}}}).
func WithStorageMiddleware(name string, options map[string]any) Option {
	return func(s *settings) {
		s.middleware = append(s.middleware, configuration.Middleware{
			Name:    name,
			Options: configuration.Parameters(options),
		})
	}
}

// WithHtpasswd turns on htpasswd (basic) auth with this user. The first user
// given becomes Registry.Username/Password, which the client helpers use.
func WithHtpasswd(username, password string) Option {
	return func(s *settings) { s.users = append(s.users, user{username, password}) }
}

// WithRedis points Distribution's own `redis:` section at addr. Reclaim's
// middleware takes its Redis settings from its middleware options instead;
// see WithStorageMiddleware.
func WithRedis(addr string) Option {
	return func(s *settings) { s.redisAddr = addr }
}

// WithConfig edits the configuration after every other option has been
// applied: the escape hatch for anything this package has no option for.
func WithConfig(edit func(*configuration.Configuration)) Option {
	return func(s *settings) { s.edits = append(s.edits, edit) }
}

func newSettings(t testing.TB, opts []Option) *settings {
	t.Helper()
	s := &settings{}
	for _, o := range opts {
		o(s)
	}
	if s.root == "" {
		s.root = t.TempDir()
	}
	return s
}

// config is the test configuration: filesystem storage under s.root, deletes
// on, the same blob descriptor cache as configs/dev.yml, no background upload
// purging (it would touch storage at a random time in the middle of a test),
// and foreign layer URLs accepted as the OCI conformance suite expects.
func (s *settings) config(t testing.TB) *configuration.Configuration {
	t.Helper()
	cfg := &configuration.Configuration{Version: configuration.MajorMinorVersion(0, 1)}
	cfg.Log.Level = "info"
	cfg.Log.Formatter = "text"
	cfg.Log.AccessLog.Disabled = true
	cfg.Storage = configuration.Storage{
		"filesystem":  configuration.Parameters{"rootdirectory": s.root},
		"delete":      configuration.Parameters{"enabled": true},
		"cache":       configuration.Parameters{"blobdescriptor": "inmemory"},
		"maintenance": configuration.Parameters{"uploadpurging": map[any]any{"enabled": false}},
	}
	cfg.HTTP.Secret = httpSecret
	cfg.HTTP.Headers = map[string][]string{"X-Content-Type-Options": {"nosniff"}}
	cfg.Validation.Manifests.URLs.Allow = []string{"^https?://"}
	if len(s.middleware) > 0 {
		cfg.Middleware = map[string][]configuration.Middleware{"storage": s.middleware}
	}
	if len(s.users) > 0 {
		cfg.Auth = configuration.Auth{"htpasswd": configuration.Parameters{
			"realm": "registrytest",
			"path":  writeHtpasswd(t, s.users),
		}}
	}
	if s.redisAddr != "" {
		cfg.Redis.Options.Addrs = []string{s.redisAddr}
	}
	for _, edit := range s.edits {
		edit(cfg)
	}
	return cfg
}

func writeHtpasswd(t testing.TB, users []user) string {
	t.Helper()
	var lines []byte
	for _, u := range users {
		// MinCost: the hash only has to be valid, and every request pays for it.
		h, err := bcrypt.GenerateFromPassword([]byte(u.password), bcrypt.MinCost)
		if err != nil {
			t.Fatalf("registrytest: hash password of %q: %v", u.name, err)
		}
		lines = fmt.Appendf(lines, "%s:%s\n", u.name, h)
	}
	path := filepath.Join(t.TempDir(), "htpasswd")
	if err := os.WriteFile(path, lines, 0o600); err != nil {
		t.Fatalf("registrytest: %v", err)
	}
	return path
}
