package main

import (
	"context"
	"time"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/opencontainers/go-digest"
	"github.com/redis/go-redis/v9"

	"github.com/reclaim-registry/reclaim/storage"
	"github.com/reclaim-registry/reclaim/storage/linkdb"
	"github.com/reclaim-registry/reclaim/storage/tracker"
)

// fenceLease bounds how long a crashed rebuild blocks pushes of one link:
// it holds a fence only for one re-check and one delete.
const fenceLease = time.Minute

// openFencer connects to the Redis the reclaim middleware of config uses, so
// rebuild takes the same link fences GC takes. It returns nil when the
// config has no reclaim middleware or no shared Redis (an embedded Redis
// lives inside `serve`, out of reach).
//
// It builds a bare Tracker rather than storage.Open: Open would also assert
// the recording epoch, and a rebuild records no accesses, so it must not
// vouch for them.
//
// review queues a blob for the reclaimer (nil without a shared Redis).
func openFencer(_ context.Context, config *configuration.Configuration) (f linkdb.Fencer, review func(context.Context, digest.Digest), closeFn func(), err error) {
	var raw map[string]any
	found := false
	for _, m := range config.Middleware["storage"] {
		if m.Name == storage.MiddlewareName {
			raw, found = m.Options, true
		}
	}
	if !found {
		return nil, nil, func() {}, nil
	}
	opts, err := storage.ParseOptions(raw)
	if err != nil {
		return nil, nil, nil, err
	}
	ropts := opts.Redis
	if len(ropts.Addrs) == 0 {
		if ropts, err = storage.DistributionRedis(config); err != nil {
			return nil, nil, nil, err
		}
	}
	if len(ropts.Addrs) == 0 {
		return nil, nil, func() {}, nil
	}
	if ropts.ReadTimeout == 0 {
		ropts.ReadTimeout, ropts.WriteTimeout, ropts.DialTimeout = opts.Timeout, opts.Timeout, opts.Timeout
	}
	c := redis.NewUniversalClient(&ropts)
	t, err := tracker.NewTracker(c, tracker.TrackerOptions{Prefix: opts.Prefix, AccessTTL: opts.AccessTTL, Timeout: opts.Timeout})
	if err != nil {
		c.Close()
		return nil, nil, nil, err
	}
	q := tracker.NewQueue(c, opts.Prefix, opts.Timeout)
	review = func(ctx context.Context, blob digest.Digest) {
		// best effort: `registry gc sweep --enqueue` finds what this misses
		_ = q.Enqueue(ctx, opts.Window, blob)
	}
	return linkdb.TrackerFencer(t, opts.Window, fenceLease), review, func() { c.Close() }, nil
}
