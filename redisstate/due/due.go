// Package due is the one shape of Reclaim's work lists in Redis: a sorted
// set whose scores are the Redis time (unix ms) at which each member
// becomes due. A claim takes due members and re-scores them to now +
// lease in the same script, so two claimers never hold the same member
// and a member whose claimer died comes back when the lease runs out. A
// done removes a member only while it still holds its claim's score, so
// one marked due again during its claim is not lost. The reclaimer's
// review queue (redisstate.Queue) and the usage refresh
// (redisstate/usage) keep one each.
//
// Errors are Redis's, for the caller to wrap.
package due

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Claimed is one member a claim took: when it had become due (unix ms).
type Claimed struct {
	Member string
	Due    int64
}

// Claim takes up to n members of the set at key that are due now (Redis
// time), oldest first, and holds them for lease. leaseScore is the score
// they hold now: what Done compares.
func Claim(ctx context.Context, c redis.Scripter, key string, n int, lease time.Duration) (leaseScore int64, claimed []Claimed, err error) {
	res, err := claimScript.Run(ctx, c, []string{key}, n, lease.Milliseconds()).Slice()
	if err != nil {
		return 0, nil, err
	}
	if len(res) == 0 {
		return 0, nil, errors.New("claim: empty reply")
	}
	now, _ := res[0].(int64)
	claimed = make([]Claimed, 0, (len(res)-1)/2)
	for i := 1; i+1 < len(res); i += 2 {
		m, _ := res[i].(string)
		var d float64
		switch s := res[i+1].(type) {
		case string:
			d, _ = strconv.ParseFloat(s, 64)
		case int64:
			d = float64(s)
		}
		claimed = append(claimed, Claimed{Member: m, Due: int64(d)})
	}
	return now + lease.Milliseconds(), claimed, nil
}

// KEYS[1]: zset; ARGV: max items, lease ms. Returns {now, m1, due1, m2, due2, ...}.
var claimScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local items = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[1]))
local out = {now}
local lease = now + tonumber(ARGV[2])
for i = 1, #items, 2 do
  redis.call('ZADD', KEYS[1], lease, items[i])
  out[#out+1] = items[i]
  out[#out+1] = items[i+1]
end
return out
`)

// Held is a claimed member and the lease score its claim gave it.
type Held struct {
	Member     string
	LeaseScore int64
}

// Done removes each held member that still holds its claim's score, in
// one round trip.
func Done(ctx context.Context, c redis.Scripter, key string, held ...Held) error {
	if len(held) == 0 {
		return nil
	}
	args := make([]any, 0, 2*len(held))
	for _, h := range held {
		args = append(args, h.Member, h.LeaseScore)
	}
	return doneScript.Run(ctx, c, []string{key}, args...).Err()
}

// KEYS[1]: zset; ARGV: (member, lease score) pairs. Removes each member
// only if its score is still the claim's; returns how many it removed.
var doneScript = redis.NewScript(`
local n = 0
for i = 1, #ARGV, 2 do
  local cur = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if cur and tonumber(cur) == tonumber(ARGV[i+1]) then n = n + redis.call('ZREM', KEYS[1], ARGV[i]) end
end
return n
`)
