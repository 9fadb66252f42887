package rlog

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"
)

// redisLogEvery is how often, at most, the Redis client's own messages
// (a dial that failed, a pool that cannot connect) reach the log. While
// Redis is down every request would add one: an operator needs the first
// and a count, not thousands of copies.
const redisLogEvery = time.Minute

var quietRedis sync.Once

// QuietRedis sends the Redis client library's messages through logrus,
// at most one a minute, each with the number held back since the last.
// It is process-wide (the library has one logger); calling it again does
// nothing.
func QuietRedis() {
	quietRedis.Do(func() {
		redis.SetLogger(&redisLog{log: logrus.StandardLogger(), now: time.Now})
	})
}

// redisLog is the Redis client's logger, held to one message per
// redisLogEvery.
type redisLog struct {
	log  *logrus.Logger
	now  func() time.Time
	mu   sync.Mutex
	last time.Time // when a message was last written
	held int       // messages held back since then
}

func (l *redisLog) Printf(_ context.Context, format string, v ...any) {
	l.mu.Lock()
	now := l.now()
	if !l.last.IsZero() && now.Sub(l.last) < redisLogEvery {
		l.held++
		l.mu.Unlock()
		return
	}
	held := l.held
	l.last, l.held = now, 0
	l.mu.Unlock()
	e := l.log.WithField("source", "redis client")
	if held > 0 {
		e = e.WithField("held_back", held)
	}
	e.Warn(fmt.Sprintf(format, v...))
}
