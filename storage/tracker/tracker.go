package tracker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/internal/rlog"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/redis/go-redis/v9"
)

// The Redis key schema. Every key starts with the prefix (default
// "reclaim:"); every key about one blob carries the hash tag {<digest>} so a
// script can read and write all of them atomically in Redis Cluster.
//
//	reclaim:since                    unix ms: recording since (the epoch). Missing = GC must not trust.
//	{reclaim:since}:nodes            hash: each Redis master's last run_id, replid, evicted_keys (redishealth.go)
//	reclaim:{sha256:<hex>}:a         unix ms of the blob's last access          (PX AccessTTL)
//	reclaim:{sha256:<hex>}:a:l:<r>   unix ms of the last access of r's layer link to the blob
//	reclaim:{sha256:<hex>}:a:m:<r>   unix ms of the last access of r's manifest revision link
//	reclaim:{sha256:<hex>}:f         fence on the blob (value: token, PX lease)
//	reclaim:{sha256:<hex>}:f:l:<r>   fence on r's layer link   (":f:m:<r>": on r's revision link)
//	reclaim:{sha256:<hex>}:gone      tombstone: the blob's data was deleted     (PX GoneTTL)
//	reclaim:{sha256:<hex>}:gone:<r>  tombstone: a link of r to the blob was deleted
//	reclaim:run:<r>                  one GC run per repository (value: token, PX lease)
//
// Times are Redis server time (TIME inside the scripts), so registry and GC
// processes never compare their own clocks.

// TrackerOptions configure a Tracker. Zero values take the defaults.
type TrackerOptions struct {
	// Prefix of every key (default "reclaim:"). Tests use one per test.
	Prefix string
	// AccessTTL is how long an access record lives (default 7 days). It must
	// be well above the largest protection window GC will use.
	AccessTTL time.Duration
	// GoneTTL is how long a deletion tombstone lives (default 7 days): the
	// time a stale blob-descriptor cache entry can still be caught.
	GoneTTL time.Duration
	// Timeout bounds each registry-side Redis call (default 1 s), so a dead
	// Redis slows a pull by at most this much.
	Timeout time.Duration
	// Embedded: Redis is the in-process miniredis, which has no usable
	// INFO, never evicts and restarts only with the process.
	Embedded bool
}

// Tracker records accesses and takes fences in Redis.
type Tracker struct {
	c    redis.UniversalClient
	opts TrackerOptions

	// failing is set when a Redis call failed; the next success moves the
	// epoch forward (the gap is untrusted).
	failing atomic.Bool
	gapMu   sync.Mutex
	// watch is what the last recording tick read from INFO (redishealth.go).
	watch redisWatch
}

// NewTracker returns a tracker on c. It does not contact Redis.
func NewTracker(c redis.UniversalClient, opts TrackerOptions) (*Tracker, error) {
	if c == nil {
		return nil, errors.New("storage: NewTracker: nil redis client")
	}
	if opts.Prefix == "" {
		opts.Prefix = "reclaim:"
	}
	if opts.AccessTTL == 0 {
		opts.AccessTTL = 7 * 24 * time.Hour
	}
	if opts.GoneTTL == 0 {
		opts.GoneTTL = 7 * 24 * time.Hour
	}
	if opts.Timeout == 0 {
		opts.Timeout = time.Second
	}
	if opts.AccessTTL < time.Minute || opts.GoneTTL < 0 || opts.Timeout < 0 {
		return nil, fmt.Errorf("storage: invalid tracker options %+v", opts)
	}
	return &Tracker{c: c, opts: opts}, nil
}

// Client is the Redis client the tracker uses.
func (t *Tracker) Client() redis.UniversalClient { return t.c }

func (t *Tracker) blobKey(d digest.Digest) string { return t.opts.Prefix + "{" + d.String() + "}" }

func kindCode(k layout.LinkKind) string {
	if k == layout.LinkManifest {
		return "m"
	}
	return "l"
}

func (t *Tracker) accessKey(o layout.Object) string {
	if o.Repo == "" {
		return t.blobKey(o.Blob) + ":a"
	}
	return t.blobKey(o.Blob) + ":a:" + kindCode(o.Kind) + ":" + o.Repo
}

func (t *Tracker) fenceKey(o layout.Object) string {
	if o.Repo == "" {
		return t.blobKey(o.Blob) + ":f"
	}
	return t.blobKey(o.Blob) + ":f:" + kindCode(o.Kind) + ":" + o.Repo
}

func (t *Tracker) goneKey(o layout.Object) string {
	if o.Repo == "" {
		return t.blobKey(o.Blob) + ":gone"
	}
	return t.blobKey(o.Blob) + ":gone:" + o.Repo
}

func (t *Tracker) sinceKey() string { return t.opts.Prefix + "since" }

// KEYS: groups of (access, fence, gone), the blob's first, then its links.
// ARGV[1]: access TTL ms. Returns {0, gone} when recorded, {1, 0} when any
// fence exists. A touch never clears a tombstone, not even a writer's: the
// write may still fail (a mount that falls back to an upload, a failed
// Move), and a tombstone cleared too early lets a stale cache entry answer
// "exists". The descriptor check clears them once the storage shows the
// object back (descriptors.verify).
var touchScript = redis.NewScript(`
for i = 2, #KEYS, 3 do
  if redis.call('EXISTS', KEYS[i]) == 1 then return {1, 0} end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local gone = 0
for i = 1, #KEYS, 3 do
  if redis.call('EXISTS', KEYS[i+2]) == 1 then gone = 1 end
  local prev = tonumber(redis.call('GET', KEYS[i]) or '0') or 0
  if now > prev then
    redis.call('SET', KEYS[i], now, 'PX', ARGV[1])
  else
    redis.call('PEXPIRE', KEYS[i], ARGV[1])
  end
end
return {0, gone}
`)

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
var renewScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
`)

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

// TouchBlob records access on objs, all of one blob, unless any of them or the
// blob is fenced. gone reports a deletion tombstone on any of them.
func (t *Tracker) TouchBlob(ctx context.Context, blob digest.Digest, links []layout.Object) (gone bool, err error) {
	keys := make([]string, 0, 3*(1+len(links)))
	b := layout.Object{Blob: blob}
	keys = append(keys, t.accessKey(b), t.fenceKey(b), t.goneKey(b))
	for _, o := range links {
		keys = append(keys, t.accessKey(o), t.fenceKey(o), t.goneKey(o))
	}
	// A client that hangs up must not look like a Redis failure (which
	// would move the epoch): only our own timeout bounds the call.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.opts.Timeout)
	defer cancel()
	start := time.Now()
	res, err := touchScript.Run(ctx, t.c, keys, t.opts.AccessTTL.Milliseconds()).Int64Slice()
	metricRedisLatency.WithLabelValues("touch").Observe(time.Since(start).Seconds())
	if err != nil {
		t.failed(ctx, "touch", err)
		return false, fmt.Errorf("%w: touch %s: %v", layout.ErrTrackerUnavailable, blob, err)
	}
	t.succeeded(ctx)
	if len(res) != 2 {
		return false, fmt.Errorf("%w: touch %s: unexpected reply %v", layout.ErrTrackerUnavailable, blob, res)
	}
	if res[0] == 1 {
		metricTouches.WithLabelValues("fenced").Inc()
		return false, fmt.Errorf("%w: %s", layout.ErrFenced, blob)
	}
	metricTouches.WithLabelValues("recorded").Inc()
	return res[1] == 1, nil
}

// Touch records access on objs unless any of them (or its blob) is fenced:
// then nothing is recorded and the error wraps ErrFenced. Objects of several
// blobs cost one round trip per blob.
func (t *Tracker) Touch(ctx context.Context, objs ...layout.Object) error {
	byBlob := map[digest.Digest][]layout.Object{}
	var order []digest.Digest
	for _, o := range objs {
		if _, ok := byBlob[o.Blob]; !ok {
			order = append(order, o.Blob)
			byBlob[o.Blob] = nil
		}
		if o.Repo != "" {
			byBlob[o.Blob] = append(byBlob[o.Blob], o)
		}
	}
	for _, b := range order {
		if _, err := t.TouchBlob(ctx, b, byBlob[b]); err != nil {
			return err
		}
	}
	return nil
}

// MarkGone leaves a tombstone saying o was deleted, so that stale entries of
// Distribution's blob descriptor cache stop answering (see descriptors.go).
func (t *Tracker) MarkGone(ctx context.Context, o layout.Object) error {
	if err := t.c.Set(ctx, t.goneKey(o), 1, t.opts.GoneTTL).Err(); err != nil {
		return fmt.Errorf("%w: mark %s gone: %v", layout.ErrTrackerUnavailable, o, err)
	}
	return nil
}

// ClearGone removes the deletion tombstones of objs (they exist again).
func (t *Tracker) ClearGone(ctx context.Context, objs ...layout.Object) error {
	keys := make([]string, len(objs))
	for i, o := range objs {
		keys[i] = t.goneKey(o)
	}
	for _, k := range keys {
		// one key per call: tombstones of different blobs live in
		// different hash slots
		if err := t.c.Del(ctx, k).Err(); err != nil {
			return fmt.Errorf("%w: clear tombstone: %v", layout.ErrTrackerUnavailable, err)
		}
	}
	return nil
}

// Fence is a lease GC holds on an object while it deletes it.
type Fence struct {
	Object layout.Object
	Token  string
	// Taken is the Redis time the fence was taken.
	Taken time.Time
	key   string
}

// Fence takes a fence on o unless o was accessed within window (the error
// wraps ErrRecentlyAccessed) or o or its blob is already fenced (ErrFenced).
// It also fails with ErrNotRecording when the epoch is missing or younger
// than window: then "no access record" proves nothing. The lease bounds how
// long a crashed GC blocks writers of o.
func (t *Tracker) Fence(ctx context.Context, o layout.Object, window, lease time.Duration) (*Fence, error) {
	if window <= 0 || lease <= 0 || window >= t.opts.AccessTTL {
		return nil, fmt.Errorf("storage: Fence: window %v and lease %v must be positive and window below the access TTL %v", window, lease, t.opts.AccessTTL)
	}
	blobFence := t.fenceKey(layout.Object{Blob: o.Blob})
	tok, err := token()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	res, err := fenceScript.Run(ctx, t.c, []string{t.accessKey(o), t.fenceKey(o), blobFence},
		window.Milliseconds(), lease.Milliseconds(), tok).Int64Slice()
	metricRedisLatency.WithLabelValues("fence").Observe(time.Since(start).Seconds())
	if err != nil {
		return nil, fmt.Errorf("%w: fence %s: %v", layout.ErrTrackerUnavailable, o, err)
	}
	switch res[0] {
	case 1:
		metricFences.WithLabelValues("fenced").Inc()
		return nil, fmt.Errorf("%w: %s", layout.ErrFenced, o)
	case 2:
		metricFences.WithLabelValues("recently_accessed").Inc()
		return nil, fmt.Errorf("%w: %s at %s", layout.ErrRecentlyAccessed, o, time.UnixMilli(res[1]).UTC().Format(time.RFC3339Nano))
	}
	f := &Fence{Object: o, Token: tok, Taken: time.UnixMilli(res[1]), key: t.fenceKey(o)}
	// The epoch lives in another hash slot, so it is checked right after
	// the fence is taken; a fence without a trusted epoch is given back.
	since, err := t.RecordingSince(ctx)
	if err == nil && f.Taken.Sub(since) < window {
		err = fmt.Errorf("%w: recording only since %s, window %v", layout.ErrNotRecording, since.UTC().Format(time.RFC3339), window)
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
	if err := releaseScript.Run(ctx, t.c, []string{f.key}, f.Token).Err(); err != nil {
		return fmt.Errorf("%w: release fence on %s: %v", layout.ErrTrackerUnavailable, f.Object, err)
	}
	return nil
}

// Confirm renews f for lease if it is still held, right before the delete it
// guards. A fence that expired (a slow storage, a paused process) may have
// let a writer through, so the delete must not happen: the error then wraps
// ErrFenceLost.
func (t *Tracker) Confirm(ctx context.Context, f *Fence, lease time.Duration) error {
	n, err := renewScript.Run(ctx, t.c, []string{f.key}, f.Token, lease.Milliseconds()).Int64()
	if err != nil {
		return fmt.Errorf("%w: confirm fence on %s: %v", layout.ErrTrackerUnavailable, f.Object, err)
	}
	if n != 1 {
		metricFences.WithLabelValues("lost").Inc()
		return fmt.Errorf("%w: %s", layout.ErrFenceLost, f.Object)
	}
	return nil
}

// Fenced reports whether o (or its blob) is fenced right now.
func (t *Tracker) Fenced(ctx context.Context, o layout.Object) (bool, error) {
	n, err := t.c.Exists(ctx, t.fenceKey(o), t.fenceKey(layout.Object{Blob: o.Blob})).Result()
	if err != nil {
		return false, fmt.Errorf("%w: %v", layout.ErrTrackerUnavailable, err)
	}
	return n > 0, nil
}

// LastAccess returns o's last recorded access (Redis time); ok is false when
// there is no record (never accessed, or older than the access TTL).
func (t *Tracker) LastAccess(ctx context.Context, o layout.Object) (time.Time, bool, error) {
	v, err := t.c.Get(ctx, t.accessKey(o)).Int64()
	if errors.Is(err, redis.Nil) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("%w: last access of %s: %v", layout.ErrTrackerUnavailable, o, err)
	}
	return time.UnixMilli(v), true, nil
}

// RecordingSince returns the epoch since which access records are complete.
// ErrNotRecording when it is missing; ErrRedisEvicts while the last
// recording tick saw a maxmemory-policy that may evict records.
func (t *Tracker) RecordingSince(ctx context.Context) (time.Time, error) {
	if policy, evicts := t.watch.evicting(); evicts {
		return time.Time{}, fmt.Errorf("%w: %s", layout.ErrRedisEvicts, policy)
	}
	v, err := t.c.Get(ctx, t.sinceKey()).Result()
	if errors.Is(err, redis.Nil) {
		return time.Time{}, layout.ErrNotRecording
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: read epoch: %v", layout.ErrTrackerUnavailable, err)
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: epoch %q: %v", layout.ErrNotRecording, v, err)
	}
	return time.UnixMilli(ms), nil
}

// Now returns Redis server time, the clock all records use.
func (t *Tracker) Now(ctx context.Context) (time.Time, error) {
	n, err := t.c.Time(ctx).Result()
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: %v", layout.ErrTrackerUnavailable, err)
	}
	return n, nil
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
		return fmt.Errorf("%w: set epoch: %v", layout.ErrTrackerUnavailable, err)
	}
	t.watch.noteEpoch(time.UnixMilli(epoch))
	t.succeeded(ectx)
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.opts.Timeout)
	defer cancel()
	return t.checkRedis(ictx)
}

// KeepRecording calls StartRecording every interval until ctx is done.
func (t *Tracker) KeepRecording(ctx context.Context, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		_ = t.StartRecording(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// failed notes a registry-side Redis failure: accesses may go unrecorded
// from now until Redis answers again.
func (t *Tracker) failed(ctx context.Context, op string, err error) {
	metricRedisErrors.WithLabelValues(op).Inc()
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

// LockRepository takes the per-repository GC lease and renews it every
// lease/3 until unlock is called. ErrRepositoryBusy when another run holds
// it.
//
// held is ctx, cancelled (its cause wraps ErrLockLost) as soon as the lock
// is known lost: a renewal found it gone or taken by another token, or no
// renewal succeeded for lease/2 (Redis unreachable: it may expire unseen).
// The run does its work under held, so a run that lost its lock stops
// instead of going on beside the next one. Renewals stop when held ends.
func (t *Tracker) LockRepository(ctx context.Context, repo string, lease time.Duration) (held context.Context, unlock func(), err error) {
	if !layout.ValidRepo(repo) || lease < 3*time.Millisecond {
		return nil, nil, fmt.Errorf("storage: LockRepository(%q, %v): bad arguments", repo, lease)
	}
	key := t.opts.Prefix + "run:" + repo
	tok, err := token()
	if err != nil {
		return nil, nil, err
	}
	ok, err := t.c.SetNX(ctx, key, tok, lease).Result()
	if err != nil {
		return nil, nil, fmt.Errorf("%w: lock %s: %v", layout.ErrTrackerUnavailable, repo, err)
	}
	if !ok {
		return nil, nil, fmt.Errorf("%w: %s", layout.ErrRepositoryBusy, repo)
	}
	held, lost := context.WithCancelCause(ctx)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(lease / 3)
		defer tick.Stop()
		lastOK := time.Now()
		for {
			select {
			case <-stop:
				return
			case <-held.Done():
				return
			case <-tick.C:
			}
			start := time.Now()
			rctx, cancel := context.WithTimeout(held, lease/3)
			n, err := renewScript.Run(rctx, t.c, []string{key}, tok, lease.Milliseconds()).Int64()
			cancel()
			switch {
			case err == nil && n == 1:
				lastOK = start
			case err == nil:
				lost(fmt.Errorf("%w: %s: taken away or expired", layout.ErrLockLost, repo))
				return
			case time.Since(lastOK) >= lease/2:
				lost(fmt.Errorf("%w: %s: not renewed for %v: %v", layout.ErrLockLost, repo, time.Since(lastOK).Round(time.Millisecond), err))
				return
			}
		}
	}()
	var once sync.Once
	return held, func() {
		once.Do(func() {
			close(stop)
			<-done
			lost(nil)
			_ = releaseScript.Run(context.WithoutCancel(ctx), t.c, []string{key}, tok).Err()
		})
	}, nil
}

func token() (string, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("storage: token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// TouchScriptHash is the SHA1 the access-recording script runs under, so a
// go-redis hook can tell the registry's access writes from other calls.
func TouchScriptHash() string { return touchScript.Hash() }
