package storagetest

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Fenced is a go-redis hook whose C is closed the first time a touch is
// refused by a fence (the touch script answers [1, 0]): a writer has
// reached the fence and now waits for it, or fails retryably.
type Fenced struct {
	once sync.Once
	C    chan struct{}
}

// WatchFenced installs a Fenced hook on c, the tracker's client.
func WatchFenced(c redis.UniversalClient) *Fenced {
	s := &Fenced{C: make(chan struct{})}
	c.AddHook(s)
	return s
}

// DialHook is go-redis' hook interface; dials pass through.
func (s *Fenced) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook watches every reply for a refused touch.
func (s *Fenced) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if c, ok := cmd.(*redis.Cmd); ok {
			if v, ok := c.Val().([]any); ok && len(v) == 2 && v[0] == int64(1) && v[1] == int64(0) {
				s.once.Do(func() { close(s.C) })
			}
		}
		return err
	}
}

// ProcessPipelineHook is go-redis' hook interface; pipelines pass through.
func (s *Fenced) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
