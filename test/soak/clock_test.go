package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/reclaim-registry/reclaim/internal/pause"
)

// poll calls cond at once and then every interval until it reports true,
// ctx ends or timeout passes. It reports whether cond came true.
func poll(ctx context.Context, interval, timeout time.Duration, cond func() bool) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-deadline.C:
			return false
		case <-tick.C:
		}
	}
	return true
}

// backoff is a client's wait before retry number attempt+1.
func backoff(ctx context.Context, step time.Duration, attempt int) bool {
	return pause.For(ctx, step*time.Duration(attempt+1)) == nil
}

// jitter is a pause of between lo and lo+spread, drawn from rng.
func jitter(ctx context.Context, rng *rand.Rand, lo, spread time.Duration) bool {
	return pause.For(ctx, lo+time.Duration(rng.Int64N(int64(spread)))) == nil
}

// passWindow waits until Redis's clock (the one every access record, fence
// and epoch uses) is a window past its reading at the call: whatever was
// touched before the call is then older than W for every fence.
func (c *cluster) passWindow(ctx context.Context) error {
	start, err := c.tracker.Now(ctx)
	if err != nil {
		return err
	}
	ok := poll(ctx, 50*time.Millisecond, window+time.Minute, func() bool {
		now, err := c.tracker.Now(ctx)
		return err == nil && now.Sub(start) > window
	})
	if !ok {
		return fmt.Errorf("redis clock did not pass %s: %w", start.Add(window), context.Cause(ctx))
	}
	return nil
}

// waitOutWindow is passWindow for the test goroutine.
func (c *cluster) waitOutWindow(ctx context.Context, t testing.TB) {
	t.Helper()
	if err := c.passWindow(ctx); err != nil {
		t.Fatal(err)
	}
}

// waitTrusted waits until the recording epoch is a window old by Redis's
// clock: before that GC refuses to trust the absence of an access record.
func (c *cluster) waitTrusted(ctx context.Context, t testing.TB) {
	t.Helper()
	ok := poll(ctx, 50*time.Millisecond, window+time.Minute, func() bool {
		since, err := c.tracker.RecordingSince(ctx)
		if err != nil {
			return false
		}
		now, err := c.tracker.Now(ctx)
		return err == nil && now.Sub(since) >= window
	})
	if !ok {
		t.Fatalf("the recording epoch under %q did not become a window old", c.prefix)
	}
}

// skipWindow moves miniredis's clock w past its current reading, so that
// whatever was touched until now is older than w. The clock then stands
// still until the next skip.
func skipWindow(t testing.TB, m *miniredis.Miniredis, w time.Duration) {
	t.Helper()
	rc := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rc.Close()
	now, err := rc.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	m.SetTime(now.Add(w + time.Millisecond))
}
