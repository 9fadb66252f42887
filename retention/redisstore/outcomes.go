package redisstore

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/reclaim-registry/reclaim/retention"
)

// What became of plans, for the console: each plan's applies, and the
// previews an abort stopped before they made a plan (those store no plan).
//
//	reclaim:{<repo>}:retention:applies:<id>   list of JSON retention.ApplyReport, oldest first, expires with the plan
//	reclaim:retention:aborted                 zset: JSON AbortedPreview -> when (unix ms), the newest abortedKept
//
// Both are best effort: the apply or preview answered its caller already.

// appliesKept is how many applies of one plan are kept (the newest).
const appliesKept = 10

// abortedKept is how many aborted previews are kept, registry-wide.
const abortedKept = 200

func (s *Plans) appliesKey(repo, id string) string {
	return s.prefix + "{" + repo + "}:retention:applies:" + id
}
func (s *Plans) abortedKey() string { return s.prefix + "retention:aborted" }

// PutApply records what an apply of a plan did.
func (s *Plans) PutApply(ctx context.Context, rep *retention.ApplyReport) error {
	b, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	key := s.appliesKey(rep.Repository, rep.PlanID)
	if err := s.c.RPush(ctx, key, b).Err(); err != nil {
		return unavailable("record apply", err)
	}
	_ = s.c.LTrim(ctx, key, -appliesKept, -1).Err()
	_ = s.c.Expire(ctx, key, s.keep).Err()
	return nil
}

// Applies returns the recorded applies of plan id of repo, oldest first;
// none when it was never applied.
func (s *Plans) Applies(ctx context.Context, repo, id string) ([]retention.ApplyReport, error) {
	list, err := s.c.LRange(ctx, s.appliesKey(repo, id), 0, -1).Result()
	if err != nil {
		return nil, unavailable("read applies", err)
	}
	out := make([]retention.ApplyReport, 0, len(list))
	for _, b := range list {
		var rep retention.ApplyReport
		if err := json.Unmarshal([]byte(b), &rep); err != nil {
			return out, unavailable("decode apply of "+id, err)
		}
		out = append(out, rep)
	}
	return out, nil
}

// AbortedPreview is a preview an abort stopped (the in-use index empty,
// stale or unreadable): it stored no plan.
type AbortedPreview struct {
	Repository string    `json:"repository"`
	At         time.Time `json:"at"`
	Reason     string    `json:"reason"`
	Detail     string    `json:"detail"`
}

// PutAborted records an aborted preview.
func (s *Plans) PutAborted(ctx context.Context, a AbortedPreview) error {
	b, err := json.Marshal(a)
	if err != nil {
		return err
	}
	if err := s.c.ZAdd(ctx, s.abortedKey(), redis.Z{Score: float64(a.At.UnixMilli()), Member: string(b)}).Err(); err != nil {
		return unavailable("record aborted preview", err)
	}
	_ = s.c.ZRemRangeByRank(ctx, s.abortedKey(), 0, -abortedKept-1).Err()
	return nil
}

// Aborted returns the aborted previews since from, newest first, at most
// limit; older than keep are pruned.
func (s *Plans) Aborted(ctx context.Context, from time.Time, limit int) ([]AbortedPreview, error) {
	cutoff := time.Now().Add(-s.keep).UnixMilli()
	_ = s.c.ZRemRangeByScore(ctx, s.abortedKey(), "-inf", "("+strconv.FormatInt(cutoff, 10)).Err() // best effort
	zs, err := s.c.ZRevRangeByScore(ctx, s.abortedKey(), &redis.ZRangeBy{
		Min: strconv.FormatInt(from.UnixMilli(), 10), Max: "+inf", Count: int64(limit),
	}).Result()
	if err != nil {
		return nil, unavailable("list aborted previews", err)
	}
	out := make([]AbortedPreview, 0, len(zs))
	for _, m := range zs {
		var a AbortedPreview
		if json.Unmarshal([]byte(m), &a) == nil {
			out = append(out, a)
		}
	}
	return out, nil
}
