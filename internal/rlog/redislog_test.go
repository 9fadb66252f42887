package rlog

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
)

// While Redis is down the client library logs every failed dial: the log
// gets the first, then one a minute with how many were held back.
func TestRedisLogHoldsBackRepeats(t *testing.T) {
	var out bytes.Buffer
	log := logrus.New()
	log.SetOutput(&out)
	now := time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)
	l := &redisLog{log: log, now: func() time.Time { return now }}
	for range 100 {
		l.Printf(context.Background(), "redis: dial %s: connection refused", "127.0.0.1:6399")
	}
	if n := strings.Count(out.String(), "\n"); n != 1 {
		t.Fatalf("100 messages within a minute wrote %d lines, want 1:\n%s", n, out.String())
	}
	now = now.Add(redisLogEvery)
	l.Printf(context.Background(), "redis: dial %s: connection refused", "127.0.0.1:6399")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], "held_back=99") || !strings.Contains(lines[1], "connection refused") {
		t.Fatalf("a minute later: %q, want a second line saying 99 were held back", lines)
	}
}
