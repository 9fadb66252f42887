package registry

import (
	"context"
	"errors"
	"time"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/gc/collector"
	"github.com/reclaim-registry/reclaim/internal/config"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/redisstate"
	"github.com/reclaim-registry/reclaim/retention"
	"github.com/reclaim-registry/reclaim/retention/redisstore"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/linkdb"
	"github.com/reclaim-registry/reclaim/storage/middleware"
)

// This file adapts the storage package to the small interfaces gc
// declares, so gc stays free of Redis and storage types.

// newGCBackend builds the collector on the storage Env: the driver wrapped
// by the reclaim middleware (deletes through it remove reverse links and
// evict descriptor caches), its tracker and link index, and the window.
// dryRunWait is the config's gc.dryrunwait as gc takes it: there 0 means
// the default and a negative wait none.
func dryRunWait(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

func newGCBackend(env *middleware.Env, opts config.Options) (*gcBackend, error) {
	pins := redisstore.NewPins(env.Tracker.Client(), opts.Prefix, nil)
	usage := redisstate.NewUsageStore(env.Tracker.Client(), opts.Prefix)
	col, err := collector.New(collector.Config{
		Driver:  testDriver(env.Driver),
		Tracker: env.Tracker,
		Links:   env.Links,
		Clock:   env.Tracker,
		Runs:    env.Tracker,
		Freed:   env.Tracker,
		LinkDBComplete: func(ctx context.Context) (bool, error) {
			_, ok, err := linkdb.LinkDBComplete(ctx, env.Raw)
			return ok, err
		},
		// A missing reverse link a run finds is written back through the
		// same store the middleware writes with (gc/collector/repair.go).
		Repair: env.Links,
		MarkLinkDBIncomplete: func(ctx context.Context) error {
			return linkdb.MarkLinkDBIncomplete(ctx, env.Raw)
		},
		Pinner:       pins,
		Usage:        usage,
		Review:       env.Queue(),
		Context:      middleware.WithoutAccessRecords,
		Window:       opts.Window,
		Cap:          opts.GC.Cap,
		KeepUntagged: opts.GC.KeepUntagged,
		DryRuns:      opts.GC.DryRuns,
		DryRunWait:   dryRunWait(opts.GC.DryRunWait),
	})
	if err != nil {
		return nil, err
	}
	inuse := redisstore.NewInUse(env.Tracker.Client(), opts.Prefix)
	return &gcBackend{Collector: col, Exists: repositoryExists(env.Raw), Status: storageStatus(env),
		Pins: pins, InUse: inuse, Usage: usage, Retention: newRetentionBackend(env, opts, pins, inuse),
		HasVersion: hasVersion(env.Raw), Fenced: manifestFenced(env.Tracker), TagFenced: env.Tracker.TagFenced}, nil
}

// hasVersion is gcBackend.HasVersion on d: a tag has a current link, a
// manifest a revision link. Read below the middleware: asking records no
// access.
func hasVersion(d storagedriver.StorageDriver) func(ctx context.Context, repo string, ref retention.Ref) (bool, error) {
	return func(ctx context.Context, repo string, ref retention.Ref) (bool, error) {
		var p string
		if ref.Tag != "" {
			p = layout.TagCurrentPath(repo, ref.Tag)
		} else {
			p = layout.RevisionLinkPath(repo, ref.Digest)
		}
		_, err := d.Stat(ctx, p)
		switch {
		case err == nil:
			return true, nil
		case layout.IsNotFound(err):
			return false, nil
		}
		return false, err
	}
}

// manifestFenced is gcBackend.Fenced on the tracker.
func manifestFenced(t *redisstate.Tracker) func(ctx context.Context, repo string, d digest.Digest) (bool, error) {
	return func(ctx context.Context, repo string, d digest.Digest) (bool, error) {
		return t.Fenced(ctx, reclaim.Object{Blob: d, Repo: repo, Kind: reclaim.LinkManifest})
	}
}

// storageStatus is gcBackend.Status: whether Redis has recorded for a full
// window and whether the link database is complete.
func storageStatus(env *middleware.Env) func(ctx context.Context) map[string]any {
	return func(ctx context.Context) map[string]any {
		out := map[string]any{"window_seconds": int64(env.Window.Seconds()), "embedded_redis": env.Embedded}
		if since, err := env.Tracker.RecordingSince(ctx); err != nil {
			out["redis"] = err.Error()
		} else {
			out["redis"] = "ok"
			out["recording_since"] = since.UTC()
			out["trusted"] = time.Since(since) >= env.Window
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
	}
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

// The tracker is each of the collector's interfaces as it is: both speak
// package reclaim, and its fences and run locks are reclaim's Hold and
// RunHandle.
var (
	_ collector.Tracker      = (*redisstate.Tracker)(nil)
	_ collector.Clock        = (*redisstate.Tracker)(nil)
	_ collector.RunRecorder  = (*redisstate.Tracker)(nil)
	_ collector.LinkIndex    = (*linkdb.ReverseLinks)(nil)
	_ collector.LinkRepairer = (*linkdb.ReverseLinks)(nil)
	_ collector.UsageStore   = (*redisstate.UsageStore)(nil)
	_ collector.FreedCounter = (*redisstate.Tracker)(nil)
)
