package redisstate

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/redis/go-redis/v9"
)

// What GC freed, per UTC day, summed over every instance: collects and the
// reclaimer add to the day's hash, the console reads the last days. One
// hash per day, each command on one key (Redis Cluster), kept 8 days.

// freedDaysKept is how many days of freed counts Redis keeps.
const freedDaysKept = 8

// FreedDay is what GC deleted on one UTC day.
type FreedDay struct {
	Day     time.Time // midnight UTC
	Bytes   int64     // blob bytes freed
	Objects int64     // manifests, layer links and blobs deleted
	Runs    int64     // real collects and reclaimer ticks that deleted something
}

func (t *Tracker) freedKey(day time.Time) string {
	return t.opts.Prefix + "freed:" + day.UTC().Format(time.DateOnly)
}

// CountFreed adds what one collect or reclaimer tick deleted at at.
func (t *Tracker) CountFreed(ctx context.Context, at time.Time, bytes int64, objects int) error {
	key := t.freedKey(at)
	_, err := t.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.HIncrBy(ctx, key, "bytes", bytes)
		p.HIncrBy(ctx, key, "objects", int64(objects))
		p.HIncrBy(ctx, key, "runs", 1)
		p.Expire(ctx, key, freedDaysKept*24*time.Hour)
		return nil
	})
	if err != nil {
		return fmt.Errorf("%w: count freed bytes: %v", reclaim.ErrTrackerUnavailable, err)
	}
	return nil
}

// Freed reads the last days days up to now, today first.
func (t *Tracker) Freed(ctx context.Context, now time.Time, days int) ([]FreedDay, error) {
	days = min(max(days, 0), freedDaysKept)
	today := now.UTC().Truncate(24 * time.Hour)
	cmds := make([]*redis.MapStringStringCmd, days)
	_, err := t.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range cmds {
			cmds[i] = p.HGetAll(ctx, t.freedKey(today.AddDate(0, 0, -i)))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w: read freed bytes: %v", reclaim.ErrTrackerUnavailable, err)
	}
	out := make([]FreedDay, days)
	for i, c := range cmds {
		h := c.Val()
		out[i] = FreedDay{Day: today.AddDate(0, 0, -i), Bytes: atoi(h["bytes"]), Objects: atoi(h["objects"]), Runs: atoi(h["runs"])}
	}
	return out, nil
}

func atoi(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}
