package usage

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

func TestUsageStoreRanks(t *testing.T) {
	storagetest.ForEachBackend(t, func(t *testing.T, b storagetest.Backend) {
		s, ctx := New(b.Client(t), b.Prefix), context.Background()
		t0 := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
		// names that share a prefix and one that ends like a route
		for i, u := range []reclaim.Usage{
			{Repository: "team/app", ReclaimableBytes: 300, ExclusiveBytes: 400},
			{Repository: "team/app/pins", ReclaimableBytes: 100, ExclusiveBytes: 900},
			{Repository: "team/base", ReclaimableBytes: 200, ExclusiveBytes: 100},
		} {
			u.ComputedAt = t0.Add(time.Duration(i) * time.Minute)
			if err := s.PutUsage(ctx, u, false); err != nil {
				t.Fatal(err)
			}
		}
		names := func(us []reclaim.Usage) string {
			var out []string
			for _, u := range us {
				out = append(out, u.Repository)
			}
			return fmt.Sprint(out)
		}
		for _, tc := range []struct {
			by   string
			n    int
			want string
		}{
			{ByReclaimable, 10, "[team/app team/base team/app/pins]"},
			{ByExclusive, 10, "[team/app/pins team/app team/base]"},
			{ByReclaimable, 1, "[team/app]"},
		} {
			got, total, err := s.Top(ctx, tc.by, tc.n)
			if err != nil || names(got) != tc.want || total != 3 {
				t.Errorf("Top(%s, %d) = %s, %d, %v; want %s of 3", tc.by, tc.n, names(got), total, err, tc.want)
			}
		}
		if _, _, err := s.Top(ctx, "size", 1); err == nil {
			t.Error("Top by an unknown ranking did not fail")
		}
		u, ok, err := s.Usage(ctx, "team/app/pins")
		if err != nil || !ok || u.ExclusiveBytes != 900 || !u.ComputedAt.Equal(t0.Add(time.Minute)) {
			t.Fatalf("Usage(team/app/pins) = %+v %v %v", u, ok, err)
		}
		if _, ok, err := s.Usage(ctx, "nobody"); ok || err != nil {
			t.Fatalf("Usage(nobody) = %v %v; want none", ok, err)
		}
		// A new estimate moves the repository in the rankings.
		if err := s.PutUsage(ctx, reclaim.Usage{Repository: "team/base", ReclaimableBytes: 1000, ComputedAt: t0.Add(time.Hour)}, false); err != nil {
			t.Fatal(err)
		}
		if got, _, _ := s.Top(ctx, ByReclaimable, 1); names(got) != "[team/base]" {
			t.Errorf("after a new estimate, the top is %s", names(got))
		}
		stale, err := s.StaleUsage(ctx, 10, t0.Add(2*time.Minute))
		if err != nil || fmt.Sprint(stale) != "[team/app team/app/pins]" {
			t.Errorf("StaleUsage = %v %v; want the two estimates older than 2 minutes, oldest first", stale, err)
		}
		missing, err := s.MissingUsage(ctx, []string{"team/app", "new/repo", "team/base", "other"})
		if err != nil || fmt.Sprint(missing) != "[new/repo other]" {
			t.Errorf("MissingUsage = %v %v", missing, err)
		}
		if err := s.DeleteUsage(ctx, "team/app"); err != nil {
			t.Fatal(err)
		}
		if got, total, _ := s.Top(ctx, ByExclusive, 10); names(got) != "[team/app/pins team/base]" || total != 2 {
			t.Errorf("after DeleteUsage(team/app) Top = %s of %d", names(got), total)
		}
		if c, err := s.UsageCursor(ctx); c != "" || err != nil {
			t.Fatalf("fresh cursor = %q %v", c, err)
		}
		if err := s.SetUsageCursor(ctx, "team/app"); err != nil {
			t.Fatal(err)
		}
		if c, _ := s.UsageCursor(ctx); c != "team/app" {
			t.Fatalf("cursor = %q after SetUsageCursor", c)
		}
	})
}

func TestUsageStoreClaims(t *testing.T) {
	storagetest.ForEachBackend(t, func(t *testing.T, b storagetest.Backend) {
		s, ctx := New(b.Client(t), b.Prefix), context.Background()
		if err := s.PutUsage(ctx, reclaim.Usage{Repository: "capped/repo", ComputedAt: time.Now()}, true); err != nil {
			t.Fatal(err)
		}
		if err := s.MarkUsageDue(ctx, "pushed/repo"); err != nil {
			t.Fatal(err)
		}
		got, err := s.ClaimDueUsage(ctx, 10, time.Minute)
		if err != nil || len(got) != 2 {
			t.Fatalf("ClaimDueUsage = %v %v; want both", got, err)
		}
		if again, err := s.ClaimDueUsage(ctx, 10, time.Minute); err != nil || len(again) != 0 {
			t.Fatalf("a second claim got %v %v while the first holds them", again, err)
		}
		// Marked again while claimed: done must not unmark it.
		var pushed, capped reclaim.UsageClaim
		for _, c := range got {
			if c.Repo == "pushed/repo" {
				pushed = c
			} else {
				capped = c
			}
		}
		if err := s.MarkUsageDue(ctx, "pushed/repo"); err != nil {
			t.Fatal(err)
		}
		for _, c := range got {
			if err := s.DoneDueUsage(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
		back, err := s.ClaimDueUsage(ctx, 10, 50*time.Millisecond)
		if err != nil || len(back) != 1 || back[0].Repo != pushed.Repo {
			t.Fatalf("after done, claim = %v %v; want only %s, marked again during its claim (and not %s)", back, err, pushed.Repo, capped.Repo)
		}
		// A claimer that dies: the repository comes back after the lease.
		passDue(t, s, time.Second)
		if back, err := s.ClaimDueUsage(ctx, 10, time.Minute); err != nil || len(back) != 1 {
			t.Fatalf("after the lease, claim = %v %v; want %s back", back, err, pushed.Repo)
		}
	})
}

// passDue moves every due score d into the past.
func passDue(t *testing.T, s *Store, d time.Duration) {
	t.Helper()
	ctx := context.Background()
	items, err := s.c.ZRangeWithScores(ctx, s.key("due"), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, z := range items {
		if err := s.c.ZAdd(ctx, s.key("due"), redis.Z{Score: z.Score - float64(d.Milliseconds()), Member: z.Member}).Err(); err != nil {
			t.Fatal(err)
		}
	}
}
