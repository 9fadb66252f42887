package redisstate

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/redisstate/due"
	"github.com/redis/go-redis/v9"
)

// The review queue: blobs that may have lost their last reference, waiting
// for the background reclaimer (gc/reclaimer) to look at them.
//
//	reclaim:review    sorted set; member: blob digest; score: unix ms (Redis
//	                  time) when the blob is due for review
//
// The middleware adds a blob with due = now + W whenever one of its reverse
// links is removed and whenever an upload is committed into blobs/.../data.
// It does not check whether the removed reverse link was the last one: that
// would cost a storage List on every unlink. The reclaimer lists the reverse
// links when the item is due, which it must do anyway (invariant 5), and
// drops the item if any remain. So the queue over-approximates, which costs
// one cheap check per review, never a wrong delete.
//
// Claiming re-scores the claimed members to now + lease in the same script,
// so two reclaimers never hold the same item, and an item whose claimer
// crashed comes back after the lease. The fence the reclaimer takes before
// deleting remains the real mutual exclusion; the lease only avoids doing the
// same work twice. The set is one key (one hash slot in Redis Cluster), which
// is fine: it is per registry, not per blob.
//
// Items are acknowledged with a compare-and-delete on the lease score, so an
// enqueue that arrived while the item was being reviewed (a new due time) is
// not lost by the acknowledgement.

// Queue is the review queue in Redis.
type Queue struct {
	c       redis.UniversalClient
	key     string
	timeout time.Duration
}

// NewQueue returns the review queue under prefix (default "reclaim:").
// timeout bounds the middleware's enqueue calls (default 1 s).
func NewQueue(c redis.UniversalClient, prefix string, timeout time.Duration) *Queue {
	if timeout <= 0 {
		timeout = time.Second
	}
	return &Queue{c: c, key: orDefaultPrefix(prefix) + "review", timeout: timeout}
}

// KEYS[1]: zset; ARGV: delay ms, members... Score = Redis now + delay.
// An item already due later keeps its later due time: a later review is
// never less safe, and a claimed item keeps its lease.
var enqueueScript = redis.NewScript(`
local t = redis.call('TIME')
local due = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[1])
for i = 2, #ARGV do
  local cur = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[i]) or '0') or 0
  if due > cur then redis.call('ZADD', KEYS[1], due, ARGV[i]) end
end
return due
`)

// KEYS[1]: zset; ARGV: member, lease score, due ms. Re-scores the member to
// due if it still holds the claim's score (else a newer enqueue decides).
var requeueScript = redis.NewScript(`
local cur = redis.call('ZSCORE', KEYS[1], ARGV[1])
if (not cur) or tonumber(cur) == tonumber(ARGV[2]) then
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
  return 1
end
return 0
`)

// Enqueue adds blobs for review after delay (W), by Redis time.
func (q *Queue) Enqueue(ctx context.Context, delay time.Duration, blobs ...digest.Digest) error {
	if len(blobs) == 0 {
		return nil
	}
	args := make([]any, 0, 1+len(blobs))
	args = append(args, delay.Milliseconds())
	for _, b := range blobs {
		if err := b.Validate(); err != nil {
			return fmt.Errorf("redisstate: enqueue %q: %w", b, err)
		}
		args = append(args, b.String())
	}
	if err := enqueueScript.Run(ctx, q.c, []string{q.key}, args...).Err(); err != nil {
		return fmt.Errorf("%w: enqueue for review: %v", reclaim.ErrTrackerUnavailable, err)
	}
	return nil
}

// Claim takes up to n due items and holds them for lease.
func (q *Queue) Claim(ctx context.Context, n int, lease time.Duration) ([]reclaim.ReviewItem, error) {
	if n <= 0 || lease <= 0 {
		return nil, fmt.Errorf("redisstate: Claim(%d, %v): bad arguments", n, lease)
	}
	leaseScore, claimed, err := due.Claim(ctx, q.c, q.key, n, lease)
	if err != nil {
		return nil, fmt.Errorf("%w: claim review items: %v", reclaim.ErrTrackerUnavailable, err)
	}
	out := make([]reclaim.ReviewItem, 0, len(claimed))
	for _, c := range claimed {
		d, err := digest.Parse(c.Member)
		if err != nil {
			// A member nobody valid wrote; drop it rather than loop on it.
			_ = q.c.ZRem(ctx, q.key, c.Member).Err()
			continue
		}
		out = append(out, reclaim.ReviewItem{Blob: d, Due: time.UnixMilli(c.Due), Lease: leaseScore})
	}
	return out, nil
}

// Done removes claimed items, each unless it was enqueued again
// meanwhile, in one round trip.
func (q *Queue) Done(ctx context.Context, items ...reclaim.ReviewItem) error {
	held := make([]due.Held, len(items))
	for i, c := range items {
		held[i] = due.Held{Member: c.Blob.String(), LeaseScore: c.Lease}
	}
	if err := due.Done(ctx, q.c, q.key, held...); err != nil {
		return fmt.Errorf("%w: ack %d review items (first %s): %v", reclaim.ErrTrackerUnavailable, len(items), items[0].Blob, err)
	}
	return nil
}

// Requeue makes a claimed item due again at time at, unless it was enqueued
// again meanwhile (then the newer due time stands).
func (q *Queue) Requeue(ctx context.Context, c reclaim.ReviewItem, at time.Time) error {
	if err := requeueScript.Run(ctx, q.c, []string{q.key}, c.Blob.String(), c.Lease, at.UnixMilli()).Err(); err != nil {
		return fmt.Errorf("%w: requeue %s: %v", reclaim.ErrTrackerUnavailable, c.Blob, err)
	}
	return nil
}

// Len returns the number of queued items and how many of them are due now
// (by Redis time).
func (q *Queue) Len(ctx context.Context) (total, due int64, err error) {
	now, err := q.c.Time(ctx).Result()
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %v", reclaim.ErrTrackerUnavailable, err)
	}
	pipe := q.c.Pipeline()
	card := pipe.ZCard(ctx, q.key)
	cnt := pipe.ZCount(ctx, q.key, "-inf", strconv.FormatInt(now.UnixMilli(), 10))
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, 0, fmt.Errorf("%w: queue length: %v", reclaim.ErrTrackerUnavailable, err)
	}
	return card.Val(), cnt.Val(), nil
}

// Contains reports whether blob is queued (due or not).
func (q *Queue) Contains(ctx context.Context, blob digest.Digest) (bool, error) {
	_, err := q.c.ZScore(ctx, q.key, blob.String()).Result()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("%w: %v", reclaim.ErrTrackerUnavailable, err)
	}
	return true, nil
}
