package redisstate

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/redis/go-redis/v9"
)

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
	// beforeMark, in tests, runs between reading a dead run's record and
	// the compare-and-swap that marks it interrupted (runs.go).
	beforeMark func(marker string)
}

// NewTracker returns a tracker on c. It does not contact Redis.
func NewTracker(c redis.UniversalClient, opts TrackerOptions) (*Tracker, error) {
	if c == nil {
		return nil, errors.New("redisstate: NewTracker: nil redis client")
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
		return nil, fmt.Errorf("redisstate: invalid tracker options %+v", opts)
	}
	return &Tracker{c: c, opts: opts}, nil
}

// Client is the Redis client the tracker uses.
func (t *Tracker) Client() redis.UniversalClient { return t.c }

func (t *Tracker) blobKey(d digest.Digest) string { return t.opts.Prefix + "{" + d.String() + "}" }

func kindCode(k reclaim.LinkKind) string {
	if k == reclaim.LinkManifest {
		return "m"
	}
	return "l"
}

func (t *Tracker) accessKey(o reclaim.Object) string {
	if o.Repo == "" {
		return t.blobKey(o.Blob) + ":a"
	}
	return t.blobKey(o.Blob) + ":a:" + kindCode(o.Kind) + ":" + o.Repo
}

func (t *Tracker) fenceKey(o reclaim.Object) string {
	if o.Repo == "" {
		return t.blobKey(o.Blob) + ":f"
	}
	return t.blobKey(o.Blob) + ":f:" + kindCode(o.Kind) + ":" + o.Repo
}

func (t *Tracker) goneKey(o reclaim.Object) string {
	if o.Repo == "" {
		return t.blobKey(o.Blob) + ":gone"
	}
	return t.blobKey(o.Blob) + ":gone:" + o.Repo
}

func (t *Tracker) sinceKey() string { return t.opts.Prefix + "since" }

// KEYS: groups of (access, fence, gone), the blob's first, then its links.
// ARGV[1]: access TTL ms. Returns {1, 0} when any fence exists, else {0, 0}
// when recorded and no tombstone exists, or {0, 1, i, value, ...}: the
// group index i (0 the blob, then its links) and value of each tombstone
// found. A touch never clears a tombstone, not even a writer's: the write
// may still fail (a mount that falls back to an upload, a failed Move), and
// a tombstone cleared too early lets a stale cache entry answer "exists".
// The descriptor check clears the ones it saw once the storage shows the
// object back (descriptors.verify, ClearGone).
var touchScript = redis.NewScript(`
for i = 2, #KEYS, 3 do
  if redis.call('EXISTS', KEYS[i]) == 1 then return {1, 0} end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {0, 0}
for i = 1, #KEYS, 3 do
  local g = redis.call('GET', KEYS[i+2])
  if g then
    out[2] = 1
    out[#out+1] = (i - 1) / 3
    out[#out+1] = g
  end
  local prev = tonumber(redis.call('GET', KEYS[i]) or '0') or 0
  if now > prev then
    redis.call('SET', KEYS[i], now, 'PX', ARGV[1])
  else
    redis.call('PEXPIRE', KEYS[i], ARGV[1])
  end
end
return out
`)

// Tombstone is a deletion tombstone a touch found: the object it marks
// deleted and the value it held. Every MarkGone writes a value of its own,
// so ClearGone removes exactly the tombstones a check saw, never one a
// delete wrote since.
type Tombstone struct {
	Object reclaim.Object
	Value  string
}

// TouchBlob records access on objs, all of one blob, unless any of them or the
// blob is fenced. gone holds the deletion tombstones found on any of them
// (empty when none).
func (t *Tracker) TouchBlob(ctx context.Context, blob digest.Digest, links []reclaim.Object) (gone []Tombstone, err error) {
	keys := t.touchKeys(blob, links)
	// A client that hangs up must not look like a Redis failure (which
	// would move the epoch): only our own timeout bounds the call.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.opts.Timeout)
	defer cancel()
	start := time.Now()
	res, err := touchScript.Run(ctx, t.c, keys, t.opts.AccessTTL.Milliseconds()).Slice()
	metricRedisLatency.WithLabelValues("touch").Observe(time.Since(start).Seconds())
	if err != nil {
		t.failed(ctx, "touch", err)
		return nil, fmt.Errorf("%w: touch %s: %v", reclaim.ErrTrackerUnavailable, blob, err)
	}
	t.succeeded(ctx)
	r := touchResult(blob, links, res, nil)
	return r.Gone, r.Err
}

// Touch records access on objs unless any of them (or its blob) is fenced:
// then nothing is recorded and the error wraps ErrFenced. Objects of several
// blobs cost one round trip per blob.
func (t *Tracker) Touch(ctx context.Context, objs ...reclaim.Object) error {
	byBlob := map[digest.Digest][]reclaim.Object{}
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
// Its value is new each time: a check that saw an older one cannot clear it.
func (t *Tracker) MarkGone(ctx context.Context, o reclaim.Object) error {
	tok, err := token()
	if err != nil {
		return err
	}
	if err := t.c.Set(ctx, t.goneKey(o), tok, t.opts.GoneTTL).Err(); err != nil {
		return fmt.Errorf("%w: mark %s gone: %v", reclaim.ErrTrackerUnavailable, o, err)
	}
	return nil
}

// KEYS: tombstones, ARGV: the value each must still hold to be deleted.
var clearGoneScript = redis.NewScript(`
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[i] then redis.call('DEL', KEYS[i]) end
end
return 0
`)

// ClearGone removes the tombstones a touch found (their objects exist
// again), each only while it still holds the value the touch saw: a delete
// that wrote a tombstone since (after the caller's look at the storage)
// keeps it. One round trip per blob: a blob's tombstones share its hash
// slot, different blobs' do not.
func (t *Tracker) ClearGone(ctx context.Context, gone []Tombstone) error {
	type batch struct{ keys, values []string }
	byBlob := map[digest.Digest]*batch{}
	var order []digest.Digest
	seen := map[string]bool{}
	for _, g := range gone {
		k := t.goneKey(g.Object)
		if seen[k] { // a layer and a revision link of one repository share one
			continue
		}
		seen[k] = true
		b := byBlob[g.Object.Blob]
		if b == nil {
			b = &batch{}
			byBlob[g.Object.Blob] = b
			order = append(order, g.Object.Blob)
		}
		b.keys, b.values = append(b.keys, k), append(b.values, g.Value)
	}
	for _, d := range order {
		b := byBlob[d]
		args := make([]any, len(b.values))
		for i, v := range b.values {
			args[i] = v
		}
		if err := clearGoneScript.Run(ctx, t.c, b.keys, args...).Err(); err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("%w: clear tombstone: %v", reclaim.ErrTrackerUnavailable, err)
		}
	}
	return nil
}

// LastAccess returns o's last recorded access (Redis time); ok is false when
// there is no record (never accessed, or older than the access TTL).
func (t *Tracker) LastAccess(ctx context.Context, o reclaim.Object) (time.Time, bool, error) {
	v, err := t.c.Get(ctx, t.accessKey(o)).Int64()
	if errors.Is(err, redis.Nil) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("%w: last access of %s: %v", reclaim.ErrTrackerUnavailable, o, err)
	}
	return time.UnixMilli(v), true, nil
}

// Now returns Redis server time, the clock all records use.
func (t *Tracker) Now(ctx context.Context) (time.Time, error) {
	n, err := t.c.Time(ctx).Result()
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: %v", reclaim.ErrTrackerUnavailable, err)
	}
	return n, nil
}
