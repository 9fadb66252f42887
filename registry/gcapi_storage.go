package registry

import (
	"context"
	"errors"
	"time"

	"github.com/distribution/distribution/v3/configuration"
	registrymiddleware "github.com/distribution/distribution/v3/registry/middleware/registry"
	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"

	"github.com/reclaim-registry/reclaim/gc"
	"github.com/reclaim-registry/reclaim/storage"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/linkdb"
	"github.com/reclaim-registry/reclaim/storage/tracker"
)

// This file adapts the storage package to the small interfaces gc
// declares, so gc stays free of Redis and storage types.

func init() {
	openGC = openStorageGC
	// GC deletes blobs that Distribution's blob descriptor cache may still
	// list; the descriptor wrapper turns those stale entries into "blob
	// unknown" (storage/descriptors.go). Without it a HEAD answers 200 for
	// a collected blob and a re-push skips the upload: a broken image.
	// Registering the same option twice is harmless (the last one wins).
	if err := registrymiddleware.RegisterOptions(storage.RegistryOption()); err != nil {
		panic(err)
	}
}

// openStorageGC builds the collector on the process's storage Env: the
// driver wrapped by the reclaim middleware (deletes through it remove
// reverse links and evict descriptor caches), its tracker and link index.
func openStorageGC(ctx context.Context, config *configuration.Configuration, c GCConfig) (*gcBackend, error) {
	if config != nil && config.Proxy.RemoteURL != "" {
		return nil, storage.ErrProxyGC // manifests are stored unverified
	}
	env, err := storage.Open(ctx, config)
	if err != nil {
		return nil, err
	}
	// One window for everything: the larger of GC's (default 24h) and the
	// middleware's, so neither default can shrink the other.
	window := max(c.Window, env.Window)
	col, err := gc.New(gc.Config{
		Driver:  env.Driver,
		Tracker: gcTracker{env.Tracker},
		Links:   env.Links,
		LinkDBComplete: func(ctx context.Context) (bool, error) {
			_, ok, err := linkdb.LinkDBComplete(ctx, env.Raw)
			return ok, err
		},
		Context:      storage.WithoutAccessRecords,
		Window:       window,
		Cap:          c.Cap,
		KeepUntagged: c.KeepUntagged,
	})
	if err != nil {
		return nil, err
	}
	return &gcBackend{Collector: col, Exists: repositoryExists(env.Raw), Status: func(ctx context.Context) map[string]any {
		out := map[string]any{"window_seconds": int64(window.Seconds()), "embedded_redis": env.Embedded}
		if since, err := env.Tracker.RecordingSince(ctx); err != nil {
			out["redis"] = err.Error()
		} else {
			out["redis"] = "ok"
			out["recording_since"] = since.UTC()
			out["trusted"] = time.Since(since) >= window
		}
		if since, ok, err := linkdb.LinkDBComplete(ctx, env.Raw); err != nil {
			out["linkdb"] = err.Error()
		} else {
			out["linkdb_complete"] = ok
			if ok {
				out["linkdb_complete_since"] = since.UTC()
			}
		}
		return out
	}}, nil
}

// repositoryExists is gcBackend.Exists on d: a repository exists when it
// has a _manifests or a _layers directory (the collector's own definition).
// Any error other than "not found" is returned, never taken for absent.
func repositoryExists(d storagedriver.StorageDriver) func(ctx context.Context, repo string) (bool, error) {
	return func(ctx context.Context, repo string) (bool, error) {
		for _, sub := range []string{"/_manifests", "/_layers"} {
			_, err := d.Stat(ctx, layout.RepositoryPath(repo)+sub)
			var nf storagedriver.PathNotFoundError
			switch {
			case err == nil:
				return true, nil
			case !errors.As(err, &nf):
				return false, err
			}
		}
		return false, nil
	}
}

// gcTracker is the tracker as gc.Tracker: gc and the tracker share one
// vocabulary (storage/layout), so only Fence, whose result gc sees as a
// Hold, needs wrapping.
type gcTracker struct{ *tracker.Tracker }

var (
	_ gc.Tracker   = gcTracker{}
	_ gc.Clock     = gcTracker{}
	_ gc.LinkIndex = (*linkdb.ReverseLinks)(nil)
)

func (a gcTracker) Fence(ctx context.Context, o gc.Object, window, lease time.Duration) (gc.Hold, error) {
	f, err := a.Tracker.Fence(ctx, o, window, lease)
	if err != nil {
		return nil, err
	}
	return gcHold{t: a.Tracker, f: f, lease: lease}, nil
}

// gcHold is a tracker fence as the collector holds it.
type gcHold struct {
	t     *tracker.Tracker
	f     *tracker.Fence
	lease time.Duration
}

func (h gcHold) Confirm(ctx context.Context) error { return h.t.Confirm(ctx, h.f, h.lease) }

func (h gcHold) Release(ctx context.Context) error { return h.t.Release(ctx, h.f) }
