package redisstate

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/reclaim-registry/reclaim/internal/pause"
	"github.com/reclaim-registry/reclaim/internal/rlog"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/redis/go-redis/v9"
)

// KEYS[1]: since; ARGV[1]: "1" to move it forward to now, else only set if
// missing. Returns the epoch in unix ms.
var epochScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cur = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if cur == 0 or (ARGV[1] == '1' and cur < now) then
  redis.call('SET', KEYS[1], now)
  return now
end
return cur
`)

// RecordingSince returns the epoch since which access records are complete.
// ErrNotRecording when it is missing; ErrRedisEvicts while the last
// recording tick saw a maxmemory-policy that may evict records.
func (t *Tracker) RecordingSince(ctx context.Context) (time.Time, error) {
	if policy, evicts := t.watch.evicting(); evicts {
		return time.Time{}, fmt.Errorf("%w: %s", reclaim.ErrRedisEvicts, policy)
	}
	v, err := t.c.Get(ctx, t.sinceKey()).Result()
	if errors.Is(err, redis.Nil) {
		return time.Time{}, reclaim.ErrNotRecording
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: read epoch: %v", reclaim.ErrTrackerUnavailable, err)
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: epoch %q: %v", reclaim.ErrNotRecording, v, err)
	}
	return time.UnixMilli(ms), nil
}

// StartRecording is one recording tick. It sets the epoch if it is missing,
// then reads INFO and moves the epoch forward when Redis may have lost
// records silently since the last tick (restart, failover, eviction; see
// redishealth.go). The registry calls it at start and then periodically
// (KeepRecording), so a Redis that lost its data gets a fresh epoch, which
// GC will not trust for a full window.
func (t *Tracker) StartRecording(ctx context.Context) error {
	if ctx.Err() != nil {
		return ctx.Err() // shutting down: no failure to record
	}
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.opts.Timeout)
	defer cancel()
	epoch, err := epochScript.Run(ectx, t.c, []string{t.sinceKey()}, "0").Int64()
	if err != nil {
		t.failed(ectx, "epoch", err)
		return fmt.Errorf("%w: set epoch: %v", reclaim.ErrTrackerUnavailable, err)
	}
	t.watch.noteEpoch(time.UnixMilli(epoch))
	t.succeeded(ectx)
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.opts.Timeout)
	defer cancel()
	return t.checkRedis(ictx)
}

// KeepRecording calls StartRecording every interval until ctx is done.
func (t *Tracker) KeepRecording(ctx context.Context, interval time.Duration) {
	_ = t.StartRecording(ctx)
	pause.Every(ctx, interval, func() { _ = t.StartRecording(ctx) })
}

// failed notes a registry-side Redis failure: accesses may go unrecorded
// from now until Redis answers again.
func (t *Tracker) failed(ctx context.Context, op string, err error) {
	metricRedisErrors.WithLabelValues(op).Inc()
	if cc, ok := t.c.(*redis.ClusterClient); ok {
		// go-redis re-reads a cluster's slot map on MOVED or once a
		// minute, not when a dead master refuses connections: ask now
		// (in the background), so calls find a promoted replica soon.
		cc.ReloadState(ctx)
	}
	if !t.failing.Swap(true) {
		rlog.From(ctx).WithError(err).Warn("reclaim: redis unavailable; pulls go on, access records have a gap that GC will not trust")
	}
}

// succeeded closes a gap: the epoch moves forward to now so GC distrusts
// everything before it.
func (t *Tracker) succeeded(ctx context.Context) {
	if !t.failing.Load() {
		return
	}
	t.gapMu.Lock()
	defer t.gapMu.Unlock()
	if !t.failing.Load() {
		return
	}
	epoch, err := epochScript.Run(context.WithoutCancel(ctx), t.c, []string{t.sinceKey()}, "1").Int64()
	if err != nil {
		return
	}
	t.failing.Store(false)
	metricRedisGaps.Inc()
	metricEpochMoves.WithLabelValues(string(LossGap)).Inc()
	t.watch.noteLoss(RedisLoss{At: time.Now().UTC(), Reason: LossGap, Detail: "redis calls failed, then succeeded", Epoch: time.UnixMilli(epoch).UTC()})
	rlog.From(ctx).Warn("reclaim: redis is back; recording epoch moved forward over the gap")
}
