package linkdb

import (
	"context"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/tracker"
)

// TrackerFencer fences links through the access tracker the middleware
// uses, exactly as GC does: refused when the link was accessed within
// window, or when the tracker has not been recording for a full window. The
// lease bounds how long a crashed rebuild blocks pushes of that link.
func TrackerFencer(t *tracker.Tracker, window, lease time.Duration) Fencer {
	return trackerFencer{t: t, window: window, lease: lease}
}

type trackerFencer struct {
	t             *tracker.Tracker
	window, lease time.Duration
}

func (f trackerFencer) FenceLink(ctx context.Context, blob digest.Digest, repo, kind string) (func(), error) {
	fe, err := f.t.Fence(ctx, layout.Object{Blob: blob, Repo: repo, Kind: layout.LinkKind(kind)}, f.window, f.lease)
	if err != nil {
		return nil, err
	}
	return func() { _ = f.t.Release(context.WithoutCancel(ctx), fe) }, nil
}
