package registry

import (
	"context"
	"errors"
	"time"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/redisstate"
	"github.com/reclaim-registry/reclaim/retention"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/linkdb"
	"github.com/reclaim-registry/reclaim/storage/middleware"
)

// The storage reads the GC API needs (gcapi.Config's funcs), on the
// storage Env: read below the middleware, so asking records no access.

// hasVersion is gcapi.Config.HasVersion on d: a tag has a current link, a
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

// manifestFenced is gcapi.Config.Fenced on the tracker.
func manifestFenced(t *redisstate.Tracker) func(ctx context.Context, repo string, d digest.Digest) (bool, error) {
	return func(ctx context.Context, repo string, d digest.Digest) (bool, error) {
		return t.Fenced(ctx, reclaim.Object{Blob: d, Repo: repo, Kind: reclaim.LinkManifest})
	}
}

// storageStatus is gcapi.Config.Status: whether Redis has recorded for a full
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

// repositoryExists is gcapi.Config.Exists on d: a repository exists when it
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
