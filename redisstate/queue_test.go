package redisstate

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/redis/go-redis/v9"

	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

// queueRedis runs f against every backend, with a queue of its own.
func queueRedis(t *testing.T, f func(t *testing.T, q *Queue)) {
	storagetest.ForEachBackend(t, func(t *testing.T, b storagetest.Backend) {
		f(t, NewQueue(b.Client(t), b.Prefix, 0))
	})
}

// pass moves every item's score d into the past, as if d had passed: due
// times and claims' leases alike.
func pass(t *testing.T, q *Queue, d time.Duration) {
	t.Helper()
	ctx := context.Background()
	items, err := q.c.ZRangeWithScores(ctx, q.key, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, z := range items {
		if err := q.c.ZAdd(ctx, q.key, redis.Z{Score: z.Score - float64(d.Milliseconds()), Member: z.Member}).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestQueueClaimLeaseAndAck(t *testing.T) {
	queueRedis(t, func(t *testing.T, q *Queue) {
		ctx := context.Background()
		a, b := digest.FromString("qa"), digest.FromString("qb")
		if err := q.Enqueue(ctx, 0, a); err != nil {
			t.Fatal(err)
		}
		if err := q.Enqueue(ctx, time.Hour, b); err != nil {
			t.Fatal(err)
		}
		if total, due, err := q.Len(ctx); err != nil || total != 2 || due != 1 {
			t.Fatalf("Len = %d %d %v, want 2 1", total, due, err)
		}
		got, err := q.Claim(ctx, 10, 200*time.Millisecond)
		if err != nil || len(got) != 1 || got[0].Blob != a {
			t.Fatalf("Claim = %v %v, want only %s (b is not due)", got, err, a)
		}
		// Claimed: a second claimer gets nothing until the lease runs out.
		if again, err := q.Claim(ctx, 10, time.Minute); err != nil || len(again) != 0 {
			t.Fatalf("second Claim = %v %v, want nothing while leased", again, err)
		}
		pass(t, q, 300*time.Millisecond)
		back, err := q.Claim(ctx, 10, time.Minute)
		if err != nil || len(back) != 1 || back[0].Blob != a {
			t.Fatalf("Claim after lease = %v %v, want %s back (its claimer crashed)", back, err, a)
		}
		// The old claim's ack must not remove the new claim.
		if err := q.Done(ctx, got[0]); err != nil {
			t.Fatal(err)
		}
		if ok, _ := q.Contains(ctx, a); !ok {
			t.Fatal("a stale claim's ack removed an item someone else holds")
		}
		if err := q.Done(ctx, back[0]); err != nil {
			t.Fatal(err)
		}
		if ok, _ := q.Contains(ctx, a); ok {
			t.Fatal("Done did not remove the item")
		}
	})
}

func TestQueueEnqueueDuringReviewSurvivesAck(t *testing.T) {
	queueRedis(t, func(t *testing.T, q *Queue) {
		ctx := context.Background()
		a := digest.FromString("qa")
		if err := q.Enqueue(ctx, 0, a); err != nil {
			t.Fatal(err)
		}
		cl, err := q.Claim(ctx, 1, time.Second)
		if err != nil || len(cl) != 1 {
			t.Fatalf("Claim = %v %v", cl, err)
		}
		// A reverse link removed while the reclaimer looks at the blob.
		if err := q.Enqueue(ctx, time.Hour, a); err != nil {
			t.Fatal(err)
		}
		if err := q.Done(ctx, cl[0]); err != nil {
			t.Fatal(err)
		}
		if err := q.Requeue(ctx, cl[0], time.Now()); err != nil {
			t.Fatal(err)
		}
		if ok, _ := q.Contains(ctx, a); !ok {
			t.Fatal("the newer enqueue was lost")
		}
		if _, due, _ := q.Len(ctx); due != 0 {
			t.Fatal("a stale requeue overrode the newer due time")
		}
	})
}

func TestQueueRequeueAndLaterDueWins(t *testing.T) {
	queueRedis(t, func(t *testing.T, q *Queue) {
		ctx := context.Background()
		a := digest.FromString("qa")
		if err := q.Enqueue(ctx, time.Hour, a); err != nil {
			t.Fatal(err)
		}
		// An earlier due time does not pull the review forward.
		if err := q.Enqueue(ctx, 0, a); err != nil {
			t.Fatal(err)
		}
		if _, due, _ := q.Len(ctx); due != 0 {
			t.Fatal("an earlier enqueue replaced a later due time")
		}
		if err := q.Enqueue(ctx, time.Hour, digest.Digest("nonsense")); err == nil {
			t.Fatal("enqueue of an invalid digest succeeded")
		}
		if _, err := q.Claim(ctx, 0, time.Second); err == nil {
			t.Fatal("Claim(0) succeeded")
		}
		// Requeue of a claimed item moves its due time.
		b := digest.FromString("qb")
		_ = q.Enqueue(ctx, 0, b)
		cl, _ := q.Claim(ctx, 5, time.Hour)
		if len(cl) != 1 {
			t.Fatalf("claimed %v", cl)
		}
		if err := q.Requeue(ctx, cl[0], time.Now().Add(-time.Second)); err != nil {
			t.Fatal(err)
		}
		if again, _ := q.Claim(ctx, 5, time.Hour); len(again) != 1 || again[0].Blob != b {
			t.Fatalf("requeued item not due again: %v", again)
		}
	})
}

// Many concurrent claimers never hold the same item at once.
func TestQueueConcurrentClaimsAreDisjoint(t *testing.T) {
	queueRedis(t, func(t *testing.T, q *Queue) {
		ctx := context.Background()
		var all []digest.Digest
		for i := range 200 {
			all = append(all, digest.FromString("item"+string(rune('a'+i%26))+string(rune(i))))
		}
		if err := q.Enqueue(ctx, 0, all...); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		seen := map[digest.Digest]int{}
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					cl, err := q.Claim(ctx, 7, time.Hour)
					if err != nil {
						t.Error(err)
						return
					}
					if len(cl) == 0 {
						return
					}
					mu.Lock()
					for _, x := range cl {
						seen[x.Blob]++
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if len(seen) != len(all) {
			t.Fatalf("claimed %d distinct items, want %d", len(seen), len(all))
		}
		for d, n := range seen {
			if n != 1 {
				t.Fatalf("%s claimed %d times", d, n)
			}
		}
	})
}
