package linkdb

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Progress reports a long walk: a redrawn bar with rate and ETA on a
// terminal, a log line every LogEvery otherwise (logs, CI, kubectl logs).
type Progress struct {
	Out      io.Writer
	TTY      bool
	LogEvery time.Duration

	mu     sync.Mutex
	phase  string
	total  int64
	skip   int64 // units already done when the phase began
	start  time.Time
	done   atomic.Int64 // units (repositories or shards) finished
	links  atomic.Int64 // links looked at, for the rate
	stop   chan struct{}
	exited chan struct{}
	tick   <-chan time.Time // test hook: replaces the ticker
}

// IsTerminal reports whether w is a terminal, without a dependency: a
// character device is what an interactive shell gives us.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// begin starts a phase of total units, done of which are already finished
// (skipped from a checkpoint).
func (p *Progress) begin(phase string, total, done int) {
	if p == nil || p.Out == nil {
		return
	}
	p.mu.Lock()
	p.phase, p.total, p.skip, p.start = phase, int64(total), int64(done), time.Now()
	p.mu.Unlock()
	p.done.Store(int64(done))
	p.links.Store(0)
	p.stop, p.exited = make(chan struct{}), make(chan struct{})
	every := p.LogEvery
	if p.TTY {
		every = 250 * time.Millisecond
	} else if every <= 0 {
		every = 30 * time.Second
	}
	tick, stopTicker := p.tick, func() {}
	if tick == nil {
		t := time.NewTicker(every)
		tick, stopTicker = t.C, t.Stop
	}
	go func() {
		defer close(p.exited)
		defer stopTicker()
		for {
			select {
			case <-p.stop:
				return
			case <-tick:
				p.print(false)
			}
		}
	}()
}

func (p *Progress) unit() {
	if p != nil {
		p.done.Add(1)
	}
}

func (p *Progress) link() {
	if p != nil {
		p.links.Add(1)
	}
}

// end stops the ticker and prints the phase's final line.
func (p *Progress) end() {
	if p == nil || p.Out == nil || p.stop == nil {
		return
	}
	close(p.stop)
	<-p.exited
	p.stop = nil
	p.print(true)
}

func (p *Progress) print(final bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	done, links := p.done.Load(), p.links.Load()
	el := time.Since(p.start)
	rate := float64(links) / max(el.Seconds(), 1e-3)
	eta := "?"
	if ran := done - p.skip; ran > 0 && done < p.total {
		// units skipped from a checkpoint took no time; only count this run's.
		left := time.Duration(float64(el) / float64(ran) * float64(p.total-done))
		eta = left.Round(time.Second).String()
	} else if done >= p.total {
		eta = "0s"
	}
	pct := 100.0
	if p.total > 0 {
		pct = 100 * float64(done) / float64(p.total)
	}
	if p.TTY {
		const width = 30
		n := int(pct / 100 * width)
		bar := strings.Repeat("=", n) + strings.Repeat(" ", width-n)
		fmt.Fprintf(p.Out, "\r%-12s [%s] %d/%d %5.1f%%  %d links  %.0f links/s  ETA %s   ",
			p.phase, bar, done, p.total, pct, links, rate, eta)
		if final {
			fmt.Fprintln(p.Out)
		}
		return
	}
	fmt.Fprintf(p.Out, "%s %s: %d/%d (%.1f%%), %d links, %.0f links/s, elapsed %s, ETA %s\n",
		time.Now().UTC().Format(time.RFC3339), p.phase, done, p.total, pct, links, rate,
		el.Round(time.Second), eta)
}
