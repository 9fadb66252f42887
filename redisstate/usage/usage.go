// Package usage keeps each repository's reclaimable-bytes estimate in
// Reclaim's Redis and ranks the repositories by it: the GC API's usage
// endpoints read it, a collect writes it, the reclaimer refreshes the
// stale and the due ones. GC's decisions never read it.
package usage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/redisstate/due"
	"github.com/redis/go-redis/v9"
)

// Store keeps each repository's reclaimable-bytes estimate
// (reclaim.Usage, made by gc/collector/usage.go) and ranks the repositories by it:
//
//	reclaim:{<repo>}:usage       JSON reclaim.Usage, the repository's last estimate
//	reclaim:usage:reclaimable    sorted set: repo -> reclaimable bytes
//	reclaim:usage:exclusive      sorted set: repo -> exclusive bytes
//	reclaim:usage:computed       sorted set: repo -> unix ms the estimate was made (the oldest are refreshed first)
//	reclaim:usage:due            sorted set: repo -> unix ms (Redis time) it became due for a refresh;
//	                             a claim re-scores it to now + lease
//	reclaim:usage:cursor         the last repository name the reclaimer's walk of the catalog looked at
//
// The record carries the repository's hash tag, like the rest of the
// per-repository keys; the rankings are one key each (one slot each in
// Redis Cluster, like the review queue), so every command touches one key
// and a write is a pipeline of single-key commands, never a transaction
// across slots. The rankings may therefore lag the record by the width of
// one pipeline; each read of the ranking reads the records themselves.
type Store struct {
	c      redis.UniversalClient
	prefix string
}

// New returns the usage store under prefix (default "reclaim:").
func New(c redis.UniversalClient, prefix string) *Store {
	if prefix == "" {
		prefix = "reclaim:"
	}
	return &Store{c: c, prefix: prefix}
}

// The rankings.
const (
	ByReclaimable = "reclaimable"
	ByExclusive   = "exclusive"
)

func (s *Store) recordKey(repo string) string { return s.prefix + "{" + repo + "}:usage" }
func (s *Store) key(name string) string       { return s.prefix + "usage:" + name }

// KEYS[1]: the due set; ARGV[1]: member. Due now (Redis time), whatever
// its score was: a repository claimed and marked again meanwhile stays due
// after the claim is done.
var markDueScript = redis.NewScript(`
local t = redis.call('TIME')
return redis.call('ZADD', KEYS[1], tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), ARGV[1])
`)

func unavailable(what string, err error) error {
	return fmt.Errorf("%w: usage: %s: %v", reclaim.ErrTrackerUnavailable, what, err)
}

// PutUsage stores u and ranks it; due marks it due for a refresh at once.
func (s *Store) PutUsage(ctx context.Context, u reclaim.Usage, due bool) error {
	b, err := json.Marshal(u)
	if err != nil {
		return err
	}
	repo := u.Repository
	pipe := s.c.Pipeline()
	pipe.Set(ctx, s.recordKey(repo), b, 0)
	pipe.ZAdd(ctx, s.key(ByReclaimable), redis.Z{Score: float64(u.ReclaimableBytes), Member: repo})
	pipe.ZAdd(ctx, s.key(ByExclusive), redis.Z{Score: float64(u.ExclusiveBytes), Member: repo})
	pipe.ZAdd(ctx, s.key("computed"), redis.Z{Score: float64(u.ComputedAt.UnixMilli()), Member: repo})
	if due {
		markDueScript.Eval(ctx, pipe, []string{s.key("due")}, repo)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return unavailable("put "+repo, err)
	}
	return nil
}

// DeleteUsage drops repo's record and its ranks.
func (s *Store) DeleteUsage(ctx context.Context, repo string) error {
	pipe := s.c.Pipeline()
	pipe.Del(ctx, s.recordKey(repo))
	for _, k := range []string{ByReclaimable, ByExclusive, "computed", "due"} {
		pipe.ZRem(ctx, s.key(k), repo)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return unavailable("delete "+repo, err)
	}
	return nil
}

// Usage reads repo's record; ok is false when there is none.
func (s *Store) Usage(ctx context.Context, repo string) (u reclaim.Usage, ok bool, err error) {
	b, err := s.c.Get(ctx, s.recordKey(repo)).Bytes()
	if errors.Is(err, redis.Nil) {
		return reclaim.Usage{}, false, nil
	}
	if err != nil {
		return reclaim.Usage{}, false, unavailable("get "+repo, err)
	}
	if err := json.Unmarshal(b, &u); err != nil {
		return reclaim.Usage{}, false, fmt.Errorf("usage of %s: %w", repo, err)
	}
	return u, true, nil
}

// Top returns the records of the n repositories ranked highest by
// (ByReclaimable or ByExclusive), highest first, and how many are ranked.
// It costs one round trip for the ranking and one per Redis master for
// the records, whatever the registry holds.
func (s *Store) Top(ctx context.Context, by string, n int) ([]reclaim.Usage, int64, error) {
	if (by != ByReclaimable && by != ByExclusive) || n <= 0 {
		return nil, 0, fmt.Errorf("usage: Top(%q, %d): bad arguments", by, n)
	}
	pipe := s.c.Pipeline()
	card := pipe.ZCard(ctx, s.key(by))
	top := pipe.ZRevRange(ctx, s.key(by), 0, int64(n-1))
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, 0, unavailable("rank by "+by, err)
	}
	repos := top.Val()
	if len(repos) == 0 {
		return []reclaim.Usage{}, card.Val(), nil
	}
	pipe = s.c.Pipeline()
	gets := make([]*redis.StringCmd, len(repos))
	for i, r := range repos {
		gets[i] = pipe.Get(ctx, s.recordKey(r))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, 0, unavailable("records", err)
	}
	out := make([]reclaim.Usage, 0, len(repos))
	for _, g := range gets {
		var u reclaim.Usage
		b, err := g.Bytes()
		if err != nil || json.Unmarshal(b, &u) != nil {
			continue // deleted between the two reads
		}
		out = append(out, u)
	}
	return out, card.Val(), nil
}

// MarkUsageDue marks repo due for a refresh now.
func (s *Store) MarkUsageDue(ctx context.Context, repo string) error {
	if err := markDueScript.Run(ctx, s.c, []string{s.key("due")}, repo).Err(); err != nil {
		return unavailable("mark "+repo+" due", err)
	}
	return nil
}

// ClaimDueUsage takes up to n due repositories, oldest first, and holds
// them for lease: no other reclaimer claims them until it runs out.
func (s *Store) ClaimDueUsage(ctx context.Context, n int, lease time.Duration) ([]reclaim.UsageClaim, error) {
	if n <= 0 || lease <= 0 {
		return nil, fmt.Errorf("usage: ClaimDueUsage(%d, %v): bad arguments", n, lease)
	}
	leaseScore, claimed, err := due.Claim(ctx, s.c, s.key("due"), n, lease)
	if err != nil {
		return nil, unavailable("claim due", err)
	}
	out := make([]reclaim.UsageClaim, len(claimed))
	for i, c := range claimed {
		out[i] = reclaim.UsageClaim{Repo: c.Member, Lease: leaseScore}
	}
	return out, nil
}

// DoneDueUsage unmarks a claimed repository, unless it was marked due
// again since the claim.
func (s *Store) DoneDueUsage(ctx context.Context, c reclaim.UsageClaim) error {
	if err := due.Done(ctx, s.c, s.key("due"), due.Held{Member: c.Repo, LeaseScore: c.Lease}); err != nil {
		return unavailable("done "+c.Repo, err)
	}
	return nil
}

// StaleUsage lists up to n repositories whose estimate was made before
// before, oldest first.
func (s *Store) StaleUsage(ctx context.Context, n int, before time.Time) ([]string, error) {
	repos, err := s.c.ZRangeByScore(ctx, s.key("computed"), &redis.ZRangeBy{Min: "-inf",
		Max: "(" + strconv.FormatInt(before.UnixMilli(), 10), Count: int64(n)}).Result()
	if err != nil {
		return nil, unavailable("stale", err)
	}
	return repos, nil
}

// MissingUsage returns those of repos that have no record, in one
// pipeline.
func (s *Store) MissingUsage(ctx context.Context, repos []string) ([]string, error) {
	if len(repos) == 0 {
		return nil, nil
	}
	pipe := s.c.Pipeline()
	ex := make([]*redis.IntCmd, len(repos))
	for i, r := range repos {
		ex[i] = pipe.Exists(ctx, s.recordKey(r))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, unavailable("exists", err)
	}
	var out []string
	for i, e := range ex {
		if e.Val() == 0 {
			out = append(out, repos[i])
		}
	}
	return out, nil
}

// UsageCursor is where the walk of the catalog stands ("" at its start):
// the last repository name it looked at.
func (s *Store) UsageCursor(ctx context.Context) (string, error) {
	c, err := s.c.Get(ctx, s.key("cursor")).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return "", nil
	case err != nil:
		return "", unavailable("cursor", err)
	}
	return c, nil
}

// SetUsageCursor moves the walk of the catalog.
func (s *Store) SetUsageCursor(ctx context.Context, cursor string) error {
	if err := s.c.Set(ctx, s.key("cursor"), cursor, 0).Err(); err != nil {
		return unavailable("set cursor", err)
	}
	return nil
}
