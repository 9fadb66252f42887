package redisstate

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// walkCursor is one key that holds where a walk of the catalog stands,
// shared by every instance: the last repository name the walk looked at
// ("" or absent: the start). The scrub and the usage refresh keep one
// each; one GET and one SET per tick. Its errors are Redis's, for the
// caller to wrap.
type walkCursor struct {
	c   redis.UniversalClient
	key string
}

func (w walkCursor) get(ctx context.Context) (string, error) {
	v, err := w.c.Get(ctx, w.key).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return v, err
}

func (w walkCursor) set(ctx context.Context, v string) error {
	return w.c.Set(ctx, w.key, v, 0).Err()
}

// orDefaultPrefix is the key prefix of the stores: "reclaim:" when none
// is given.
func orDefaultPrefix(prefix string) string {
	if prefix == "" {
		return "reclaim:"
	}
	return prefix
}
