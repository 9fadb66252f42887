package linkdb

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestProgressLogLines(t *testing.T) {
	var b syncBuffer
	tick := make(chan time.Time)
	p := &Progress{Out: &b, tick: tick}
	p.begin("repositories", 10, 2)
	for range 4 {
		p.unit()
		p.link()
		tick <- time.Now()
	}
	p.end()
	out := b.String()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 2 {
		t.Fatalf("want periodic lines, got %q", out)
	}
	last := lines[len(lines)-1]
	for _, want := range []string{"repositories: 6/10", "4 links", "links/s", "ETA "} {
		if !strings.Contains(last, want) {
			t.Errorf("last line %q lacks %q", last, want)
		}
	}
	if strings.Contains(out, "\r") {
		t.Error("carriage returns in log output")
	}

	var tty syncBuffer
	p = &Progress{Out: &tty, TTY: true}
	p.begin("blobs", 4, 0)
	p.unit()
	p.end()
	if !strings.HasPrefix(tty.String(), "\r") || !strings.Contains(tty.String(), "[=======") {
		t.Errorf("terminal bar: %q", tty.String())
	}
}

// syncBuffer is a bytes.Buffer the progress goroutine and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
