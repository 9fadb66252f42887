package redisstate

import (
	"context"
	"fmt"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/redis/go-redis/v9"
)

// BlobTouch is one blob's objects for TouchBlobs: the blob and its links,
// as for TouchBlob.
type BlobTouch struct {
	Blob  digest.Digest
	Links []reclaim.Object
}

// TouchResult is the outcome of one BlobTouch, as TouchBlob would report
// it: Err wraps reclaim.ErrFenced when the blob or a link is fenced (nothing
// recorded for that blob), reclaim.ErrTrackerUnavailable when Redis failed.
type TouchResult struct {
	Gone []Tombstone
	Err  error
}

// TouchBlobs is TouchBlob for several blobs in one round trip: the same
// touch script, once per blob (each on its own blob's keys, one hash slot,
// so Redis Cluster runs it like a single TouchBlob), sent as one pipeline.
// Each blob's outcome stands alone: a fence on one records nothing for it
// and leaves the others recorded.
func (t *Tracker) TouchBlobs(ctx context.Context, touches []BlobTouch) []TouchResult {
	out := make([]TouchResult, len(touches))
	if len(touches) == 0 {
		return out
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.opts.Timeout)
	defer cancel()
	keys := make([][]string, len(touches))
	for i, bt := range touches {
		keys[i] = t.touchKeys(bt.Blob, bt.Links)
	}
	start := time.Now()
	cmds := make([]*redis.Cmd, len(touches))
	_, _ = t.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range touches {
			cmds[i] = touchScript.EvalSha(ctx, p, keys[i], t.opts.AccessTTL.Milliseconds())
		}
		return nil
	})
	metricRedisLatency.WithLabelValues("touch_batch").Observe(time.Since(start).Seconds())
	failed := false
	for i, bt := range touches {
		res, err := cmds[i].Slice()
		if redis.HasErrorPrefix(err, "NOSCRIPT") {
			// the script is not loaded yet (a fresh or flushed Redis):
			// Run loads it; rare, so one round trip per blob is fine
			res, err = touchScript.Run(ctx, t.c, keys[i], t.opts.AccessTTL.Milliseconds()).Slice()
		}
		if err != nil {
			t.failed(ctx, "touch", err)
		}
		out[i] = touchResult(bt.Blob, bt.Links, res, err)
		failed = failed || (err != nil)
	}
	if !failed {
		t.succeeded(ctx)
	}
	return out
}

// touchKeys are the KEYS of the touch script for blob and its links.
func (t *Tracker) touchKeys(blob digest.Digest, links []reclaim.Object) []string {
	keys := make([]string, 0, 3*(1+len(links)))
	b := reclaim.Object{Blob: blob}
	keys = append(keys, t.accessKey(b), t.fenceKey(b), t.goneKey(b))
	for _, o := range links {
		keys = append(keys, t.accessKey(o), t.fenceKey(o), t.goneKey(o))
	}
	return keys
}

// touchResult reads one touch script reply: err is the call's error, and
// links are the touch's links, in the order of its KEYS.
func touchResult(blob digest.Digest, links []reclaim.Object, res []any, err error) TouchResult {
	if err != nil {
		return TouchResult{Err: fmt.Errorf("%w: touch %s: %v", reclaim.ErrTrackerUnavailable, blob, err)}
	}
	bad := func() TouchResult {
		return TouchResult{Err: fmt.Errorf("%w: touch %s: unexpected reply %v", reclaim.ErrTrackerUnavailable, blob, res)}
	}
	if len(res) < 2 || len(res)%2 != 0 {
		return bad()
	}
	if fenced, _ := res[0].(int64); fenced == 1 {
		metricTouches.WithLabelValues("fenced").Inc()
		return TouchResult{Err: fmt.Errorf("%w: %s", reclaim.ErrFenced, blob)}
	}
	var gone []Tombstone
	for i := 2; i < len(res); i += 2 {
		n, ok1 := res[i].(int64)
		v, ok2 := res[i+1].(string)
		if !ok1 || !ok2 || n < 0 || int(n) > len(links) {
			return bad()
		}
		o := reclaim.Object{Blob: blob}
		if n > 0 {
			o = links[n-1]
		}
		gone = append(gone, Tombstone{Object: o, Value: v})
	}
	metricTouches.WithLabelValues("recorded").Inc()
	return TouchResult{Gone: gone}
}
