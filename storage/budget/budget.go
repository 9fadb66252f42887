package budget

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/reclaim-registry/reclaim/internal/pause"
)

type ctxKey struct{}

// Mark marks ctx as GC's: driver calls made with it wait on the budget.
// The collector, the reclaimer, retention apply, the sweep and the rebuild
// mark theirs; a client's request never is.
func Mark(ctx context.Context) context.Context {
	return context.WithValue(ctx, ctxKey{}, true)
}

// Marked reports whether ctx is marked by Mark.
func Marked(ctx context.Context) bool {
	v, _ := ctx.Value(ctxKey{}).(bool)
	return v
}

// Options is the budget's configuration.
type Options struct {
	// Rate is GC's storage requests per second; 0: no limit (a
	// throttling answer still slows GC, down from the rate it had).
	Rate int
	// InFlight bounds GC's storage requests running at once; 0: no bound.
	InFlight int
}

const (
	// cutEvery: one halving per this long, however many calls in flight
	// come back throttled together (they answer for the same rate).
	cutEvery = time.Second
	// minRate is the floor halvings stop at.
	minRate = 1.0
	// retries: a throttled GC call is retried this many times.
	retries = 5
	// firstBackoff doubles with each retry (100 ms .. 1.6 s, jittered).
	firstBackoff = 100 * time.Millisecond
)

// Budget is one process's GC storage budget. It is safe for concurrent
// use. The zero value is not usable: use New.
type Budget struct {
	opts  Options
	sem   chan struct{} // nil: no in-flight bound
	now   func() time.Time
	sleep func(ctx context.Context, d time.Duration) error

	mu sync.Mutex
	// limit is the rate GC may use now (0: none); target what it grows
	// back to (the configured rate, or, with none, the rate GC had when
	// it was first throttled: reaching it lifts the limit again).
	limit, target float64
	tokens        float64
	last, lastCut time.Time
	// the rate GC had in the last whole second, for a cut with no limit
	second     time.Time
	inSecond   int
	lastSecond int

	stats Stats
}

// Stats counts what the budget saw; Snapshot reads it.
type Stats struct {
	Requests  atomic.Int64 // GC's storage requests (retries included)
	Waited    atomic.Int64 // nanoseconds GC waited for the budget
	Throttled atomic.Int64 // throttling answers, GC's and clients'
	Clients   atomic.Int64 // of them, answers to clients' calls
	Retries   atomic.Int64 // GC calls retried after a throttling answer
	Cuts      atomic.Int64 // halvings of the rate
}

// New returns a budget of opts.
func New(opts Options) *Budget {
	b := &Budget{opts: opts, now: time.Now, sleep: pause.For}
	if opts.InFlight > 0 {
		b.sem = make(chan struct{}, opts.InFlight)
	}
	b.limit, b.target = float64(opts.Rate), float64(opts.Rate)
	b.last = b.now()
	metricLimit.Set(b.limit)
	return b
}

// Options returns the configuration b was built with.
func (b *Budget) Options() Options { return b.opts }

// Stats returns b's counters.
func (b *Budget) Stats() *Stats { return &b.stats }

// Limit is the rate GC may use now, in requests per second (0: none).
func (b *Budget) Limit() float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(b.now())
	return b.limit
}

// refill grows the tokens and, after a cut, the limit, to now. mu held.
func (b *Budget) refill(now time.Time) {
	dt := now.Sub(b.last).Seconds()
	if dt <= 0 {
		return
	}
	b.last = now
	if b.limit > 0 && b.limit < b.target {
		b.limit = min(b.target, b.limit+b.target/10*dt)
		if b.limit >= b.target && b.opts.Rate == 0 {
			b.limit, b.target = 0, 0 // recovered: no limit again
		}
		metricLimit.Set(b.limit)
	}
	if b.limit > 0 {
		// at most a tenth of a second's worth banked: a burst after
		// idling (or a backoff) stays small
		b.tokens = min(max(b.limit/10, 1), b.tokens+b.limit*dt)
	}
}

// take waits for one request's token and an in-flight slot; release gives
// the slot back. An error is ctx's.
func (b *Budget) take(ctx context.Context) (release func(), err error) {
	start := b.now()
	if err := b.takeRate(ctx); err != nil {
		return nil, err
	}
	release = func() {}
	if b.sem != nil {
		select {
		case b.sem <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		metricInFlight.Inc()
		release = func() { <-b.sem; metricInFlight.Dec() }
	}
	b.waited(b.now().Sub(start))
	return release, nil
}

// takeRate counts one request and waits for its token.
func (b *Budget) takeRate(ctx context.Context) error {
	now := b.now()
	b.mu.Lock()
	b.refill(now)
	b.count(now)
	var wait time.Duration
	if b.limit > 0 {
		// a reservation: the token may go negative, the caller sleeps
		// until it would have been there
		b.tokens--
		if b.tokens < 0 {
			wait = time.Duration(-b.tokens / b.limit * float64(time.Second))
		}
	}
	b.mu.Unlock()
	b.stats.Requests.Add(1)
	metricRequests.Inc()
	if wait <= 0 {
		return nil
	}
	return b.sleep(ctx, wait)
}

func (b *Budget) waited(d time.Duration) {
	if d > 0 {
		b.stats.Waited.Add(int64(d))
		metricWait.Add(d.Seconds())
	}
}

// count keeps the rate of the last whole second. mu held.
func (b *Budget) count(now time.Time) {
	if now.Sub(b.second) >= time.Second {
		b.lastSecond = b.inSecond
		if now.Sub(b.second) >= 2*time.Second {
			b.lastSecond = 0
		}
		b.second, b.inSecond = now, 0
	}
	b.inSecond++
}

// throttled notes a throttling answer and halves the rate, once per
// cutEvery.
func (b *Budget) throttled(client bool) {
	b.stats.Throttled.Add(1)
	who := "gc"
	if client {
		b.stats.Clients.Add(1)
		who = "client"
	}
	metricThrottled.WithLabelValues(who).Inc()
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	if !b.lastCut.IsZero() && now.Sub(b.lastCut) < cutEvery {
		return
	}
	b.lastCut = now
	if b.limit == 0 {
		// no limit: start from the rate GC had
		b.target = max(float64(max(b.lastSecond, b.inSecond)), 2*minRate)
		b.limit = b.target
	}
	b.limit = max(b.limit/2, minRate)
	b.tokens = min(b.tokens, 0)
	b.stats.Cuts.Add(1)
	metricCuts.Inc()
	metricLimit.Set(b.limit)
}

// backoff waits before retry n (0-based): firstBackoff doubled n times,
// jittered down by up to half.
func (b *Budget) backoff(ctx context.Context, n int) error {
	d := firstBackoff << n
	d -= time.Duration(rand.Int64N(int64(d / 2)))
	b.waited(d)
	return b.sleep(ctx, d)
}

// charge takes a request's token and no in-flight slot (a walk's pages).
func (b *Budget) charge(ctx context.Context) error {
	start := b.now()
	err := b.takeRate(ctx)
	b.waited(b.now().Sub(start))
	return err
}
