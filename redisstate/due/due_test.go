package due

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

// A claim takes only what is due and holds it for its lease; a done
// removes a member only while it still holds its claim's score, so one
// marked due again during its claim stays.
func TestClaimHoldsAndDoneCompares(t *testing.T) {
	storagetest.ForEachBackend(t, func(t *testing.T, b storagetest.Backend) {
		c, ctx, key := b.Client(t), context.Background(), b.Prefix+"due-test"
		t.Cleanup(func() { c.Del(context.Background(), key) })
		now, err := c.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		ms := now.UnixMilli()
		if err := c.ZAdd(ctx, key, redis.Z{Score: float64(ms - 1000), Member: "a"}, redis.Z{Score: float64(ms - 500), Member: "b"},
			redis.Z{Score: float64(ms + time.Hour.Milliseconds()), Member: "later"}).Err(); err != nil {
			t.Fatal(err)
		}
		lease, claimed, err := Claim(ctx, c, key, 10, time.Minute)
		if err != nil || len(claimed) != 2 || claimed[0] != (Claimed{"a", ms - 1000}) || claimed[1] != (Claimed{"b", ms - 500}) {
			t.Fatalf("claim = %+v %v; want a and b, oldest first, with their due times", claimed, err)
		}
		if lease < ms+time.Minute.Milliseconds() {
			t.Fatalf("lease score %d, want at least now + 1m (%d)", lease, ms+time.Minute.Milliseconds())
		}
		if _, again, err := Claim(ctx, c, key, 10, time.Minute); err != nil || len(again) != 0 {
			t.Fatalf("a second claim took %+v (%v); the first holds a and b, later is not due", again, err)
		}
		// b is marked due again while it is claimed: its done must not drop it
		if err := c.ZAdd(ctx, key, redis.Z{Score: float64(ms), Member: "b"}).Err(); err != nil {
			t.Fatal(err)
		}
		if err := Done(ctx, c, key, Held{"a", lease}, Held{"b", lease}); err != nil {
			t.Fatal(err)
		}
		left, err := c.ZRange(ctx, key, 0, -1).Result()
		if err != nil || len(left) != 2 || left[0] != "b" || left[1] != "later" {
			t.Fatalf("after done: %v %v; want b (marked again) and later", left, err)
		}
		if err := Done(ctx, c, key); err != nil {
			t.Fatalf("an empty done: %v", err)
		}
	})
}
