package redisstate

import (
	"context"
	"testing"
	"time"

	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

// Freed sums CountFreed per UTC day: today first, days without deletions
// zero, days older than asked for left out.
func TestFreedDailySums(t *testing.T) {
	storagetest.ForEachBackend(t, func(t *testing.T, b storagetest.Backend) {
		tr := newTestTracker(t, b)
		ctx := context.Background()
		now := time.Date(2026, 12, 3, 0, 30, 0, 0, time.UTC)
		for _, c := range []struct {
			at      time.Time
			bytes   int64
			objects int
		}{
			{now, 100, 3},
			{now.Add(-20 * time.Minute), 50, 2},  // today too
			{now.Add(-40 * time.Minute), 7, 1},   // yesterday, 23:50
			{now.AddDate(0, 0, -3), 1000, 10},    // three days ago
			{now.AddDate(0, 0, -9), 99999, 9999}, // older than asked for
		} {
			if err := tr.CountFreed(ctx, c.at, c.bytes, c.objects); err != nil {
				t.Fatal(err)
			}
		}
		days, err := tr.Freed(ctx, now, 7)
		if err != nil {
			t.Fatal(err)
		}
		want := []FreedDay{
			{Bytes: 150, Objects: 5, Runs: 2}, {Bytes: 7, Objects: 1, Runs: 1}, {}, {Bytes: 1000, Objects: 10, Runs: 1}, {}, {}, {},
		}
		if len(days) != len(want) {
			t.Fatalf("Freed returned %d days, want %d", len(days), len(want))
		}
		for i, d := range days {
			if day := now.Truncate(24*time.Hour).AddDate(0, 0, -i); !d.Day.Equal(day) {
				t.Errorf("day %d is %v, want %v", i, d.Day, day)
			}
			if d.Bytes != want[i].Bytes || d.Objects != want[i].Objects || d.Runs != want[i].Runs {
				t.Errorf("day %d (%s): %+v, want bytes %d objects %d runs %d",
					i, d.Day.Format(time.DateOnly), d, want[i].Bytes, want[i].Objects, want[i].Runs)
			}
		}
	})
}
