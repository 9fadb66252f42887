package middleware

import (
	"context"
	"strings"
	"testing"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/distribution/distribution/v3/registry/handlers"
	"github.com/distribution/distribution/v3/registry/storage/driver/inmemory"

	"github.com/reclaim-registry/reclaim/internal/config"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

// open is what registry.New does with the storage half of a configuration.
func open(ctx context.Context, conf *configuration.Configuration) (*Env, error) {
	opts, _, err := config.Load(conf)
	if err != nil {
		return nil, err
	}
	return Open(ctx, conf, opts)
}

// Open binds the Env to its configuration: the middleware Distribution
// builds for that configuration hands back the Env's driver, until Close.
func TestOpenBindsAndFallsBack(t *testing.T) {
	b := storagetest.Backends(t)[0]
	ctx := context.Background()
	cfg := &configuration.Configuration{}
	cfg.Storage = configuration.Storage{"inmemory": configuration.Parameters{}}
	cfg.Middleware = map[string][]configuration.Middleware{"storage": {{Name: MiddlewareName, Options: map[string]any{"prefix": "memo:"}}}}
	cfg.Redis.Options.Addrs = []string{b.Addr} // Distribution's redis: section
	app := &handlers.App{Context: ctx, Config: cfg}
	if _, err := initMiddleware(app, inmemory.New(), nil); err == nil || !strings.Contains(err.Error(), "no reclaim Env") {
		t.Fatalf("middleware before Open: %v", err)
	}
	e1, err := open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e1.Close()
	if _, err := open(ctx, cfg); err == nil {
		t.Fatal("a second Env opened for one configuration")
	}
	if d, err := initMiddleware(app, inmemory.New(), nil); err != nil || d != e1.Driver {
		t.Fatalf("middleware = %p, %v; want the Env's driver %p", d, err, e1.Driver)
	}
	if e1.Embedded {
		t.Fatal("embedded redis with Distribution's redis configured")
	}
	// It records into Distribution's Redis.
	if _, err := b.Mini.Get("memo:since"); err != nil {
		t.Fatalf("epoch not in the configured redis: %v", err)
	}
	e1.Close()
	if _, err := initMiddleware(app, inmemory.New(), nil); err == nil {
		t.Fatal("middleware found a closed Env")
	}
	// With no redis anywhere: embedded.
	cfg2 := &configuration.Configuration{Storage: cfg.Storage, Middleware: cfg.Middleware}
	e3, err := open(ctx, cfg2)
	if err != nil {
		t.Fatal(err)
	}
	defer e3.Close()
	if !e3.Embedded {
		t.Fatalf("Embedded=%v", e3.Embedded)
	}
	if _, err := e3.Tracker.RecordingSince(ctx); err != nil {
		t.Fatalf("embedded epoch: %v", err)
	}
}

// Distribution applies a storage middleware entry even when it says
// `disabled: true`; the middleware then passes the driver through.
func TestDisabledMiddlewarePassesThrough(t *testing.T) {
	cfg := &configuration.Configuration{}
	cfg.Middleware = map[string][]configuration.Middleware{"storage": {{Name: MiddlewareName, Disabled: true}}}
	below := inmemory.New()
	d, err := initMiddleware(&handlers.App{Context: context.Background(), Config: cfg}, below, nil)
	if err != nil || d != below {
		t.Fatalf("disabled entry: %v, %v", d, err)
	}
}
