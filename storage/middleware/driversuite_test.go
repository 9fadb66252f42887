package middleware

import (
	"context"
	"flag"
	"testing"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
	"github.com/distribution/distribution/v3/registry/storage/driver/testsuites"
	"github.com/redis/go-redis/v9"

	"github.com/reclaim-registry/reclaim/internal/config"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

// TestDriverSuite runs Distribution's own storage driver suite against the
// reclaim middleware over a filesystem driver: the middleware is a correct
// driver. The suite's paths lie outside the registry's tree, so this proves
// every call the middleware passes through (and its classification of
// arbitrary paths); the link and blob paths it intercepts are covered by
// the tests around the real app.
func TestDriverSuite(t *testing.T) {
	if !testing.Short() {
		// The long mode adds a 5 GiB stream and larger concurrent files,
		// which the middleware hands to the driver below untouched.
		_ = flag.Set("test.short", "true")
		t.Cleanup(func() { _ = flag.Set("test.short", "false") })
	}
	b := storagetest.Backends(t)[0]
	testsuites.Driver(t, func() (storagedriver.StorageDriver, error) {
		below, err := filesystem.FromParameters(map[string]any{"rootdirectory": t.TempDir()})
		if err != nil {
			return nil, err
		}
		ctx := context.Background()
		e, err := NewEnv(ctx, below, config.Options{Redis: redis.UniversalOptions{Addrs: []string{b.Addr}}, Prefix: b.Prefix})
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() { e.Close() })
		// The suite wants an empty storage: drop the link database's
		// "complete" marker NewEnv writes into an empty one.
		if err := e.Raw.Delete(ctx, "/reclaim"); err != nil {
			return nil, err
		}
		return e.Driver, nil
	}, false)
}
