package trash

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/reclaim-registry/reclaim/reclaim/trashentry"
)

// hitDaysKept is how many days of trash hits are kept.
const hitDaysKept = 8

// A hit is a pull (a manifest GET or HEAD by tag or digest, a blob GET)
// that would have answered 404 and asked for something in the trash: a
// deletion somebody still needed.

func (x index) hitsKey(day time.Time) string {
	return x.prefix + "trash:hits:" + day.UTC().Format(time.DateOnly)
}

// CountHit records one hit on e at at: one Redis round trip, on a path
// that answers 404 (or restores) anyway.
func (b *Bin) CountHit(ctx context.Context, e trashentry.Entry, at time.Time) error {
	key := b.idx.hitsKey(at)
	_, err := b.idx.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.HIncrBy(ctx, key, "hits", 1)
		p.Expire(ctx, key, hitDaysKept*24*time.Hour)
		return nil
	})
	return err
}

// Hits counts the hits of the last days days up to now (today included).
func (b *Bin) Hits(ctx context.Context, now time.Time, days int) (int64, error) {
	days = min(max(days, 0), hitDaysKept)
	today := now.UTC().Truncate(24 * time.Hour)
	cmds := make([]*redis.StringCmd, days)
	_, err := b.idx.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range cmds {
			cmds[i] = p.HGet(ctx, b.idx.hitsKey(today.AddDate(0, 0, -i)), "hits")
		}
		return nil
	})
	if err != nil && err != redis.Nil {
		return 0, err
	}
	var n int64
	for _, c := range cmds {
		v, _ := c.Int64()
		n += v
	}
	return n, nil
}

// Held sums the entries in the trash and the bytes their holds keep (the
// index's view: one scan of it).
func (b *Bin) Held(ctx context.Context) (entries int, bytes int64, err error) {
	err = b.idx.scan(ctx, func(e trashentry.Entry) error {
		entries++
		bytes += e.Size
		return nil
	})
	return entries, bytes, err
}
