package linkdb

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestProgressLogLines(t *testing.T) {
	var b bytes.Buffer // end waits for the printing goroutine: no race
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
	if len(lines) != 5 {
		t.Fatalf("want a line per tick and a final one, got %q", out)
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

	var tty bytes.Buffer
	p = &Progress{Out: &tty, TTY: true}
	p.begin("blobs", 4, 0)
	p.unit()
	p.end()
	if !strings.HasPrefix(tty.String(), "\r") || !strings.Contains(tty.String(), "[=======") {
		t.Errorf("terminal bar: %q", tty.String())
	}
}
