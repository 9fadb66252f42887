package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/reclaim-registry/reclaim/retention"
)

// Plans stores retention plans. A plan and its repository's list share the
// repository's hash tag; the registry-wide list by age is one sorted set
// (one slot), written with one ZADD per plan and never in a transaction
// with the others, so nothing spans slots on a cluster:
//
//	reclaim:{<repo>}:retention:plan:<id>   JSON retention.Plan, expires after Keep
//	reclaim:{<repo>}:retention:plans       zset: id -> created (unix ms)
//	reclaim:retention:plans                zset: "<repo>|<id>" -> created (unix ms)
//
// A plan is written first, then listed; an entry whose plan is gone
// (expired) is dropped from the lists when they are read or pruned.
type Plans struct {
	c      redis.UniversalClient
	prefix string
	keep   time.Duration
}

// NewPlans stores under prefix on c; plans are kept for keep.
func NewPlans(c redis.UniversalClient, prefix string, keep time.Duration) *Plans {
	return &Plans{c: c, prefix: prefix, keep: keep}
}

func (s *Plans) planKey(repo, id string) string {
	return s.prefix + "{" + repo + "}:retention:plan:" + id
}
func (s *Plans) repoKey(repo string) string { return s.prefix + "{" + repo + "}:retention:plans" }
func (s *Plans) allKey() string             { return s.prefix + "retention:plans" }

// Put stores plan and lists it.
func (s *Plans) Put(ctx context.Context, plan *retention.Plan) error {
	b, err := json.Marshal(plan)
	if err != nil {
		return err
	}
	score := float64(plan.CreatedAt.UnixMilli())
	if err := s.c.Set(ctx, s.planKey(plan.Repository, plan.ID), b, s.keep).Err(); err != nil {
		return unavailable("store plan", err)
	}
	if err := s.c.ZAdd(ctx, s.repoKey(plan.Repository), redis.Z{Score: score, Member: plan.ID}).Err(); err != nil {
		return unavailable("list plan", err)
	}
	if err := s.c.ZAdd(ctx, s.allKey(), redis.Z{Score: score, Member: plan.Repository + "|" + plan.ID}).Err(); err != nil {
		return unavailable("list plan", err)
	}
	return nil
}

// Get returns plan id of repo; ErrPlanNotFound when there is none.
func (s *Plans) Get(ctx context.Context, repo, id string) (*retention.Plan, error) {
	b, err := s.c.Get(ctx, s.planKey(repo, id)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("%w: %s", retention.ErrPlanNotFound, id)
	}
	if err != nil {
		return nil, unavailable("read plan", err)
	}
	var p retention.Plan
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, unavailable("decode plan "+id, err)
	}
	return &p, nil
}

// Summary is one listed plan.
type Summary struct {
	ID         string    `json:"id"`
	Repository string    `json:"repository"`
	CreatedAt  time.Time `json:"created_at"`
}

// List returns the plans created in [from, to], newest first, at most
// limit: of repo, or of every repository when repo is "". Entries older
// than keep are pruned from the list read.
func (s *Plans) List(ctx context.Context, repo string, from, to time.Time, limit int) ([]Summary, error) {
	key := s.allKey()
	if repo != "" {
		key = s.repoKey(repo)
	}
	cutoff := time.Now().Add(-s.keep).UnixMilli()
	_ = s.c.ZRemRangeByScore(ctx, key, "-inf", "("+strconv.FormatInt(cutoff, 10)).Err() // best effort
	zs, err := s.c.ZRevRangeByScoreWithScores(ctx, key, &redis.ZRangeBy{
		Min: strconv.FormatInt(from.UnixMilli(), 10), Max: strconv.FormatInt(to.UnixMilli(), 10), Count: int64(limit),
	}).Result()
	if err != nil {
		return nil, unavailable("list plans", err)
	}
	out := make([]Summary, 0, len(zs))
	for _, z := range zs {
		m, _ := z.Member.(string)
		sum := Summary{ID: m, Repository: repo, CreatedAt: time.UnixMilli(int64(z.Score)).UTC()}
		if repo == "" {
			r, id, ok := strings.Cut(m, "|")
			if !ok {
				continue
			}
			sum.Repository, sum.ID = r, id
		}
		out = append(out, sum)
	}
	return out, nil
}
