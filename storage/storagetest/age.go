package storagetest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Age moves every access record ("...}:a...") and the recording epoch
// (prefix+"since") under prefix d into the past, as if d had passed without
// an access: the test clock for miniredis and a real Redis (or cluster)
// alike, whose scripts read their own TIME. It knows redisstate's key
// schema (docs/architecture.md, "Redis key schema").
func Age(t testing.TB, c redis.UniversalClient, prefix string, d time.Duration) {
	t.Helper()
	ctx := context.Background()
	err := ScanKeys(ctx, c, prefix+"*", func(k string) error {
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
