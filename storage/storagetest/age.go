package storagetest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Age moves every access record ("...}:a...") and the recording epoch
// (prefix+"since") under prefix d into the past, as if d had passed without
// an access: the test clock for miniredis and a real Redis alike, whose
// scripts read their own TIME. It knows the tracker's key schema
// (docs/architecture.md, "Redis key schema").
func Age(t testing.TB, c redis.UniversalClient, prefix string, d time.Duration) {
	t.Helper()
	ctx := context.Background()
	iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		if k != prefix+"since" && !strings.Contains(k, "}:a") {
			continue
		}
		v, err := c.Get(ctx, k).Int64()
		if err != nil {
			t.Fatalf("age %s: %v", k, err)
		}
		if err := c.Set(ctx, k, v-d.Milliseconds(), redis.KeepTTL).Err(); err != nil {
			t.Fatalf("age %s: %v", k, err)
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
}
