package trash

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/reclaim/trashentry"
)

// index is the trash's Redis index; storage holds the entries themselves.
//
//	<prefix>trash:entries        HASH  id -> entry JSON
//	<prefix>trash:expiry         ZSET  id scored by expiry (unix ms): purge order
//	<prefix>trash:names:{<repo>} HASH  name -> entry JSON: what a 404 asks
//
// A name is "tag:<tag>" for a tag, the digest for a manifest, and
// "blob:<digest>" for a layer link: the three things a pull asks for.
type index struct {
	c      redis.UniversalClient
	prefix string
}

func (x index) entriesKey() string          { return x.prefix + "trash:entries" }
func (x index) expiryKey() string           { return x.prefix + "trash:expiry" }
func (x index) namesKey(repo string) string { return x.prefix + "trash:names:{" + repo + "}" }

// name is what a pull of e's object asks for; "" for a blob nobody links.
func name(e trashentry.Entry) string {
	switch e.Kind {
	case reclaim.KindTag:
		return "tag:" + e.Tag
	case reclaim.KindManifest:
		return e.Digest.String()
	case reclaim.KindLayerLink:
		return "blob:" + e.Digest.String()
	}
	return ""
}

// add indexes e: one pipelined round trip (its keys may live on different
// Cluster slots, so not a transaction; a partial add is repaired by
// Reindex and harms nothing meanwhile: storage decides).
func (x index) add(ctx context.Context, e trashentry.Entry) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	_, err = x.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, x.entriesKey(), e.ID, b)
		p.ZAdd(ctx, x.expiryKey(), redis.Z{Score: float64(e.Expires.UnixMilli()), Member: e.ID})
		if n := name(e); n != "" {
			p.HSet(ctx, x.namesKey(e.Repo), n, b)
		}
		return nil
	})
	return err
}

// removeName deletes a name only while it still names this entry: a
// newer entry for the same name (the tag removed again) stays.
var removeName = redis.NewScript(`
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  return redis.call('HDEL', KEYS[1], ARGV[1])
end
return 0`)

// remove drops e from the index.
func (x index) remove(ctx context.Context, e trashentry.Entry) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	_, err = x.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.HDel(ctx, x.entriesKey(), e.ID)
		p.ZRem(ctx, x.expiryKey(), e.ID)
		if n := name(e); n != "" {
			removeName.Eval(ctx, p, []string{x.namesKey(e.Repo)}, n, b) // EVAL: a pipeline cannot fall back from EVALSHA
		}
		return nil
	})
	return err
}

// lookup is the one round trip of a pull that would 404: the newest entry
// that removed what it asks for, if any.
func (x index) lookup(ctx context.Context, repo, n string) (trashentry.Entry, bool, error) {
	b, err := x.c.HGet(ctx, x.namesKey(repo), n).Bytes()
	if errors.Is(err, redis.Nil) {
		return trashentry.Entry{}, false, nil
	}
	if err != nil {
		return trashentry.Entry{}, false, err
	}
	var e trashentry.Entry
	if err := json.Unmarshal(b, &e); err != nil {
		return e, false, fmt.Errorf("trash index %s %s: %w", repo, n, err)
	}
	return e, true, nil
}

// scan calls fn with every indexed entry, a page at a time: its cost
// grows with the number of entries in the trash.
func (x index) scan(ctx context.Context, fn func(trashentry.Entry) error) error {
	var cursor uint64
	for {
		kv, next, err := x.c.HScan(ctx, x.entriesKey(), cursor, "*", 1000).Result()
		if err != nil {
			return err
		}
		for i := 0; i+1 < len(kv); i += 2 {
			var e trashentry.Entry
			if err := json.Unmarshal([]byte(kv[i+1]), &e); err != nil {
				return fmt.Errorf("trash index entry %s: %w", kv[i], err)
			}
			if err := fn(e); err != nil {
				return err
			}
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

// due lists up to max entries expired at now, oldest expiry first.
func (x index) due(ctx context.Context, now time.Time, max int) ([]trashentry.Entry, error) {
	ids, err := x.c.ZRangeByScore(ctx, x.expiryKey(), &redis.ZRangeBy{Min: "-inf", Max: strconv.FormatInt(now.UnixMilli(), 10), Count: int64(max)}).Result()
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	vals, err := x.c.HMGet(ctx, x.entriesKey(), ids...).Result()
	if err != nil {
		return nil, err
	}
	out := make([]trashentry.Entry, 0, len(ids))
	for i, v := range vals {
		s, ok := v.(string)
		if !ok {
			// expiry without entry (a partial add or remove): drop it
			x.c.ZRem(ctx, x.expiryKey(), ids[i])
			continue
		}
		var e trashentry.Entry
		if err := json.Unmarshal([]byte(s), &e); err != nil {
			return nil, fmt.Errorf("trash index entry %s: %w", ids[i], err)
		}
		out = append(out, e)
	}
	return out, nil
}
