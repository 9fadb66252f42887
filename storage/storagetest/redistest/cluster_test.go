package redistest

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

// The fixtures start, serve, fail over, and stop. The tracker's and the
// storage package's failover tests use them in CI; these run with
// RECLAIM_TEST_FAILOVER_LONG=1.
func TestClusterFailsOver(t *testing.T) {
	longForm(t)
	c := StartCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := c.Client(t)
	if err := cl.Set(ctx, "{k}x", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	m, err := c.MasterFor(ctx, "{k}x")
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.ReplicaOf(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	if err := waitFor(ctx, func(ctx context.Context) error { return cl.Wait(ctx, 1, time.Second).Err() }); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	c.Kill(m)
	if err := c.WaitMaster(ctx, r); err != nil {
		t.Fatal(err)
	}
	t.Logf("replica %s promoted %v after its master %s was killed", r, time.Since(t0).Round(time.Millisecond), m)
	if now, err := c.MasterFor(ctx, "{k}x"); err != nil || now != r {
		t.Fatalf("key served by %s (%v), want the promoted %s", now, err, r)
	}
	// go-redis reloads the slot map on MOVED, on ForEachMaster, or when
	// told to; a dial error alone does not.
	cl.ReloadState(ctx)
	err = waitFor(ctx, func(ctx context.Context) error {
		if v, err := cl.Get(ctx, "{k}x").Result(); err != nil || v != "1" {
			return fmt.Errorf("replicated key after failover: %q, %v", v, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestSentinelFailsOver(t *testing.T) {
	longForm(t)
	s := StartSentinel(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m, err := s.Master(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := s.Client(t)
	if err := c.Set(ctx, "k", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Wait(ctx, 1, 5*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT: %d replicas, %v", n, err)
	}
	t0 := time.Now()
	s.Kill(m)
	if err := s.WaitMaster(ctx, s.Replica()); err != nil {
		t.Fatal(err)
	}
	t.Logf("sentinels promoted %s %v after the master %s was killed", s.Replica(), time.Since(t0).Round(time.Millisecond), m)
	if err := waitFor(ctx, func(ctx context.Context) error { return c.Get(ctx, "k").Err() }); err != nil {
		t.Fatal(err)
	}
}

func longForm(t *testing.T) {
	if os.Getenv("RECLAIM_TEST_FAILOVER_LONG") == "" {
		t.Skip("set RECLAIM_TEST_FAILOVER_LONG=1")
	}
}
