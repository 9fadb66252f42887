package storagetest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Age moves every access record ("...}:a..."), the recording epoch
// (prefix+"since") and the review queue's due times (prefix+"review") under
// prefix d into the past, as if d had passed without an access: the test
// clock for miniredis and a real Redis (or cluster) alike, whose scripts
// read their own TIME. It knows redisstate's key schema
// (docs/architecture.md, "Redis key schema").
func Age(t testing.TB, c redis.UniversalClient, prefix string, d time.Duration) {
	t.Helper()
	ctx := context.Background()
	err := ScanKeys(ctx, c, prefix+"*", func(k string) error {
		if k == prefix+"review" {
			return ageScores(ctx, c, k, d)
		}
		if k != prefix+"since" && !strings.Contains(k, "}:a") {
			return nil
		}
		v, err := c.Get(ctx, k).Int64()
		if err != nil {
			return fmt.Errorf("age %s: %w", k, err)
		}
		if err := c.Set(ctx, k, v-d.Milliseconds(), redis.KeepTTL).Err(); err != nil {
			return fmt.Errorf("age %s: %w", k, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// ageScores moves every score (a unix ms time) of the sorted set k d back.
func ageScores(ctx context.Context, c redis.UniversalClient, k string, d time.Duration) error {
	zs, err := c.ZRangeWithScores(ctx, k, 0, -1).Result()
	if err != nil {
		return fmt.Errorf("age %s: %w", k, err)
	}
	for i := range zs {
		zs[i].Score -= float64(d.Milliseconds())
	}
	if len(zs) > 0 {
		if err := c.ZAdd(ctx, k, zs...).Err(); err != nil {
			return fmt.Errorf("age %s: %w", k, err)
		}
	}
	return nil
}
