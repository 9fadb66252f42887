package redisstate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/redis/go-redis/v9"
)

// KEYS: access of X, fence of X, fence of X's blob (== fence of X for a blob).
// ARGV: window ms, lease ms, token.
// Returns {0, now} fenced; {1, 0} already fenced; {2, last access ms}.
var fenceScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[2]) == 1 or redis.call('EXISTS', KEYS[3]) == 1 then return {1, 0} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local a = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if a > 0 and now - a < tonumber(ARGV[1]) then return {2, a} end
redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[2])
return {0, now}
`)

// KEYS[1]: lease key; ARGV[1]: token. Deletes the key only if we hold it.
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)

// KEYS[1]: lease key; ARGV: token, lease ms. Extends the lease if we hold it.
// renewEval is also run with EVAL on a pinned connection (replicated.go).
const renewEval = `
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
`

var renewScript = redis.NewScript(renewEval)

// Fence is a lease GC holds on an object while it deletes it.
type Fence struct {
	Object reclaim.Object
	Token  string
	// Taken is the Redis time the fence was taken.
	Taken time.Time
	key   string
	mark  string // a tag fence's mark, renewed on release (tagfence.go)
	t     *Tracker
	lease time.Duration
}

var _ reclaim.Hold = (*Fence)(nil)

// Confirm is Tracker.Confirm of f for the lease it was taken with: a
// Fence is the reclaim.Hold a collector deletes under.
func (f *Fence) Confirm(ctx context.Context) error { return f.t.Confirm(ctx, f, f.lease) }

// Release is Tracker.Release of f.
func (f *Fence) Release(ctx context.Context) error { return f.t.Release(ctx, f) }

// Fence takes a fence on o unless o was accessed within window (the error
// wraps ErrRecentlyAccessed) or o or its blob is already fenced (ErrFenced).
// It also fails with ErrNotRecording when the epoch is missing or younger
// than window: then "no access record" proves nothing. The lease bounds how
// long a crashed GC blocks writers of o.
//
// The fence is a *Fence, seen as the reclaim.Hold gc/collector deletes
// under (its Tracker interface takes this method as it is).
func (t *Tracker) Fence(ctx context.Context, o reclaim.Object, window, lease time.Duration) (reclaim.Hold, error) {
	f, err := t.fence(ctx, o, window, lease)
	if err != nil {
		return nil, err
	}
	return f, nil
}

func (t *Tracker) fence(ctx context.Context, o reclaim.Object, window, lease time.Duration) (*Fence, error) {
	if window <= 0 || lease <= 0 || window >= t.opts.AccessTTL {
		return nil, fmt.Errorf("redisstate: Fence: window %v and lease %v must be positive and window below the access TTL %v", window, lease, t.opts.AccessTTL)
	}
	blobFence := t.fenceKey(reclaim.Object{Blob: o.Blob})
	tok, err := token()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	res, err := fenceScript.Run(ctx, t.c, []string{t.accessKey(o), t.fenceKey(o), blobFence},
		window.Milliseconds(), lease.Milliseconds(), tok).Int64Slice()
	metricRedisLatency.WithLabelValues("fence").Observe(time.Since(start).Seconds())
	if err != nil {
		return nil, fmt.Errorf("%w: fence %s: %v", reclaim.ErrTrackerUnavailable, o, err)
	}
	switch res[0] {
	case 1:
		metricFences.WithLabelValues("fenced").Inc()
		return nil, fmt.Errorf("%w: %s", reclaim.ErrFenced, o)
	case 2:
		metricFences.WithLabelValues("recently_accessed").Inc()
		return nil, fmt.Errorf("%w: %s at %s", reclaim.ErrRecentlyAccessed, o, time.UnixMilli(res[1]).UTC().Format(time.RFC3339Nano))
	}
	f := &Fence{Object: o, Token: tok, Taken: time.UnixMilli(res[1]), key: t.fenceKey(o), t: t, lease: lease}
	// The epoch lives in another hash slot, so it is checked right after
	// the fence is taken, once the master that ran the script is known to
	// have kept its records (fencecheck.go); a fence without a trusted
	// epoch is given back.
	err = t.checkServer(ctx, f.key)
	var since time.Time
	if err == nil {
		since, err = t.RecordingSince(ctx)
	}
	if err == nil && f.Taken.Sub(since) < window {
		err = fmt.Errorf("%w: recording only since %s, window %v", reclaim.ErrNotRecording, since.UTC().Format(time.RFC3339), window)
	}
	if err != nil {
		_ = t.Release(context.WithoutCancel(ctx), f)
		metricFences.WithLabelValues("not_recording").Inc()
		return nil, err
	}
	metricFences.WithLabelValues("taken").Inc()
	return f, nil
}

// Release gives a fence back. Releasing one that expired or was already
// released is not an error.
func (t *Tracker) Release(ctx context.Context, f *Fence) error {
	if f == nil {
		return nil
	}
	var err error
	if f.mark != "" {
		err = releaseTagScript.Run(ctx, t.c, []string{f.key, f.mark}, f.Token, TagMarkTTL.Milliseconds()).Err()
	} else {
		err = releaseScript.Run(ctx, t.c, []string{f.key}, f.Token).Err()
	}
	if err != nil {
		return fmt.Errorf("%w: release fence on %s: %v", reclaim.ErrTrackerUnavailable, f.Object, err)
	}
	return nil
}

// Confirm renews f for lease if it is still held, right before the delete it
// guards. A fence that expired (a slow storage, a paused process) may have
// let a writer through, so the delete must not happen: the error then wraps
// ErrFenceLost.
//
// A blob's fence is confirmed only once a replica has it (replicated.go):
// a blob delete, once sent, cannot be called back, and a failover that
// lost the fence would let a writer link the data the delete removes.
func (t *Tracker) Confirm(ctx context.Context, f *Fence, lease time.Duration) error {
	if f.Object.Repo == "" && !t.opts.Embedded {
		return t.confirmReplicated(ctx, f, lease)
	}
	n, err := renewScript.Run(ctx, t.c, []string{f.key}, f.Token, lease.Milliseconds()).Int64()
	return confirmed(f, n, err)
}

// confirmed interprets the renew script's answer n.
func confirmed(f *Fence, n int64, err error) error {
	if err != nil {
		return fmt.Errorf("%w: confirm fence on %s: %v", reclaim.ErrTrackerUnavailable, f.Object, err)
	}
	if n != 1 {
		metricFences.WithLabelValues("lost").Inc()
		return fmt.Errorf("%w: %s", reclaim.ErrFenceLost, f.Object)
	}
	return nil
}

func token() (string, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("redisstate: token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// Fenced reports whether a collector holds a fence on o or on o's blob. A
// writer that must not be missed by a collector that re-reads its state
// under the fence (a pin) writes first, then asks: either the collector's
// re-read sees the write, or this sees the fence. Both keys carry the
// blob's hash tag, so this is one EXISTS in Redis Cluster too.
func (t *Tracker) Fenced(ctx context.Context, o reclaim.Object) (bool, error) {
	keys := []string{t.fenceKey(o)}
	if o.Repo != "" {
		keys = append(keys, t.fenceKey(reclaim.Object{Blob: o.Blob}))
	}
	n, err := t.c.Exists(ctx, keys...).Result()
	if err != nil {
		return false, fmt.Errorf("%w: fenced %s: %v", reclaim.ErrTrackerUnavailable, o, err)
	}
	return n > 0, nil
}
