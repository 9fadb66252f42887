package main

import (
	"context"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/internal/config"
	"github.com/reclaim-registry/reclaim/redisstate"
	"github.com/reclaim-registry/reclaim/storage/linkdb"
)

// fenceLease bounds how long a crashed rebuild blocks pushes of one link:
// it holds a fence only for one re-check and one delete.
const fenceLease = time.Minute

// openFencer connects to the Redis the reclaim middleware uses (opts, from
// config.Load), so rebuild takes the same link fences GC takes. It returns
// nil without a shared Redis (an embedded Redis lives inside `serve`, out
// of reach).
//
// It builds a bare Tracker rather than a registry.Server: the Server's
// storage Env would also assert the recording epoch, and a rebuild records
// no accesses, so it must not vouch for them.
//
// review queues a blob for the reclaimer (nil without a shared Redis).
func openFencer(opts config.Options) (f linkdb.Fencer, review func(context.Context, digest.Digest), closeFn func(), err error) {
	if len(opts.Redis.Addrs) == 0 {
		return nil, nil, func() {}, nil
	}
	c := opts.OpenRedis()
	t, err := redisstate.NewTracker(c, redisstate.TrackerOptions{Prefix: opts.Prefix, AccessTTL: opts.AccessTTL, Timeout: opts.Timeout})
	if err != nil {
		c.Close()
		return nil, nil, nil, err
	}
	q := redisstate.NewQueue(c, opts.Prefix, opts.Timeout)
	review = func(ctx context.Context, blob digest.Digest) {
		// best effort: `registry gc sweep --enqueue` finds what this misses
		_ = q.Enqueue(ctx, opts.Window, blob)
	}
	return linkdb.TrackerFencer(t, opts.Window, fenceLease), review, func() { c.Close() }, nil
}
