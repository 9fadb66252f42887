// Package pulls is retention's record of manifest pulls in Reclaim's
// Redis: when each manifest of a repository was last pulled by a client
// whose pulls count, for retention's pulled_within. The storage middleware
// writes it, retention reads it; GC never does.
package pulls

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/redis/go-redis/v9"
)

// TTL is how long a repository's pull record outlives its last
// recorded pull: a retention pulled_within longer than this finds nothing.
const TTL = 400 * 24 * time.Hour

// Store records when each manifest of a repository was last pulled, for
// retention's pulled_within. It is not an access record: GC never reads
// it, and a pull that retention ignores (a vulnerability scanner's) still
// records its access for GC.
//
//	<prefix>{<repo>}:pulls   hash: manifest digest -> unix ms of its last counted pull (PX TTL)
//
// A field stays until the hash expires, also for a manifest deleted since.
type Store struct {
	c       redis.UniversalClient
	prefix  string
	timeout time.Duration
}

// New stores under prefix (default "reclaim:") on c; each call is
// bounded by timeout (0: 1 s).
func New(c redis.UniversalClient, prefix string, timeout time.Duration) *Store {
	if prefix == "" {
		prefix = "reclaim:"
	}
	if timeout <= 0 {
		timeout = time.Second
	}
	return &Store{c: c, prefix: prefix, timeout: timeout}
}

func (p *Store) key(repo string) string { return p.prefix + "{" + repo + "}:pulls" }

// pullScript stamps a field with Redis's clock (as every access record)
// and pushes the hash's expiry on, in one round trip.
var pullScript = redis.NewScript(`
local t = redis.call('TIME')
redis.call('HSET', KEYS[1], ARGV[1], string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)))
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`)

// Record notes a pull of manifest d of repo now.
func (p *Store) Record(ctx context.Context, repo string, d digest.Digest) error {
	// a client that hangs up does not cancel the record of what it pulled
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.timeout)
	defer cancel()
	if err := pullScript.Run(ctx, p.c, []string{p.key(repo)}, d.String(), TTL.Milliseconds()).Err(); err != nil {
		return fmt.Errorf("%w: record pull of %s@%s: %v", reclaim.ErrTrackerUnavailable, repo, d, err)
	}
	return nil
}

// Pulled returns when each manifest of repo was last pulled (by a client
// whose pulls count); a manifest never pulled is absent.
func (p *Store) Pulled(ctx context.Context, repo string) (map[digest.Digest]time.Time, error) {
	m, err := p.c.HGetAll(ctx, p.key(repo)).Result()
	if err != nil {
		return nil, fmt.Errorf("%w: read pulls of %s: %v", reclaim.ErrTrackerUnavailable, repo, err)
	}
	out := make(map[digest.Digest]time.Time, len(m))
	for d, v := range m {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: pulls of %s: field %s: %q", reclaim.ErrTrackerUnavailable, repo, d, v)
		}
		out[digest.Digest(d)] = time.UnixMilli(ms)
	}
	return out, nil
}
