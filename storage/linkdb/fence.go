package linkdb

import (
	"context"
	"time"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/redisstate"
)

// Fencer takes the GC fence on one repository's link to a blob, the same
// fence GC takes before it unlinks (redisstate.Tracker.Fence). While it is
// held, the middleware refuses to (re-)create that link, so a stale reverse
// link can be removed without racing a push. An error (recently accessed,
// already fenced, Redis down) means: do not remove.
type Fencer interface {
	FenceLink(ctx context.Context, link reclaim.Object) (release func(), err error)
}

// TrackerFencer fences links through the access tracker the middleware
// uses, exactly as GC does: refused when the link was accessed within
// window, or when the tracker has not been recording for a full window. The
// lease bounds how long a crashed rebuild blocks pushes of that link.
func TrackerFencer(t *redisstate.Tracker, window, lease time.Duration) Fencer {
	return trackerFencer{t: t, window: window, lease: lease}
}

type trackerFencer struct {
	t             *redisstate.Tracker
	window, lease time.Duration
}

func (f trackerFencer) FenceLink(ctx context.Context, link reclaim.Object) (func(), error) {
	fe, err := f.t.Fence(ctx, link, f.window, f.lease)
	if err != nil {
		return nil, err
	}
	return func() { _ = fe.Release(context.WithoutCancel(ctx)) }, nil
}
