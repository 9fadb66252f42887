package redisstate

import (
	"context"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
)

// TestQueueDoneMany acknowledges a batch in one call: every item whose
// claim still stands is removed, one enqueued again meanwhile (its score
// is no longer the claim's) stays, and no items is a no-op.
func TestQueueDoneMany(t *testing.T) {
	queueRedis(t, func(t *testing.T, q *Queue) {
		ctx := context.Background()
		a, b, c := digest.FromString("da"), digest.FromString("db"), digest.FromString("dc")
		if err := q.Enqueue(ctx, 0, a, b, c); err != nil {
			t.Fatal(err)
		}
		got, err := q.Claim(ctx, 10, time.Minute)
		if err != nil || len(got) != 3 {
			t.Fatalf("Claim = %v %v, want 3 items", got, err)
		}
		if err := q.Done(ctx); err != nil {
			t.Fatalf("Done of nothing: %v", err)
		}
		// c queued again while reviewed: a later due time than its lease.
		if err := q.Enqueue(ctx, time.Hour, c); err != nil {
			t.Fatal(err)
		}
		if err := q.Done(ctx, got...); err != nil {
			t.Fatal(err)
		}
		if total, _, err := q.Len(ctx); err != nil || total != 1 {
			t.Fatalf("Len = %d %v, want 1 (c, queued again)", total, err)
		}
		if ok, err := q.Contains(ctx, c); err != nil || !ok {
			t.Fatalf("c gone after Done (%v): its new enqueue was lost", err)
		}
	})
}
