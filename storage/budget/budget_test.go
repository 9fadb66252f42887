package budget

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
	"google.golang.org/api/googleapi"

	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

// fakeClock is the budget's clock in these tests: a sleep moves it on at
// once, so the rates below are exact and nothing waits for real.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func (c *fakeClock) sleep(_ context.Context, d time.Duration) error {
	c.advance(d)
	return nil
}

func newTestBudget(o Options) (*Budget, *fakeClock) {
	clk := &fakeClock{t: time.Unix(1e9, 0)}
	b := New(o)
	b.now, b.sleep, b.last = clk.now, clk.sleep, clk.now()
	return b, clk
}

// throttled returns a store that answers SlowDown when told to, with b
// around it, and one file to Stat.
func throttledStore(t *testing.T, b *Budget) (*storagetest.Throttler, storagedriver.StorageDriver) {
	t.Helper()
	mem := inmemory.New()
	if err := mem.PutContent(context.Background(), "/f", []byte("x")); err != nil {
		t.Fatal(err)
	}
	th := storagetest.NewThrottler(mem)
	return th, Wrap(th, b)
}

// stats makes n GC Stats and returns the (fake) time they took.
func stats(t *testing.T, d storagedriver.StorageDriver, clk *fakeClock, n int) time.Duration {
	t.Helper()
	start := clk.now()
	for range n {
		if _, err := d.Stat(Mark(context.Background()), "/f"); err != nil {
			t.Fatal(err)
		}
	}
	return clk.now().Sub(start)
}

// TestSlowDownSlowsGCAndRecovers: the store answers SlowDown for a while;
// GC's call is retried until it passes, GC's rate halves, GC's next
// requests take longer, and the rate grows back to the configured one.
func TestSlowDownSlowsGCAndRecovers(t *testing.T) {
	b, clk := newTestBudget(Options{Rate: 100, InFlight: 4})
	th, d := throttledStore(t, b)

	full := stats(t, d, clk, 200) // 200 requests at 100/s
	if full < 1900*time.Millisecond || full > 2100*time.Millisecond {
		t.Fatalf("200 requests at 100/s took %v of the budget's clock, want 2s", full)
	}

	th.SlowDown(3)
	if _, err := d.Stat(Mark(context.Background()), "/f"); err != nil {
		t.Fatalf("a GC call throttled 3 times: %v, want it retried until it passed", err)
	}
	st := b.Stats()
	if th.Answered() != 3 || st.Retries.Load() != 3 || st.Throttled.Load() != 3 {
		t.Fatalf("answered %d, retried %d, throttled %d; want 3 each", th.Answered(), st.Retries.Load(), st.Throttled.Load())
	}
	if st.Cuts.Load() != 1 { // the three came within cutEvery: one halving
		t.Fatalf("%d cuts, want 1", st.Cuts.Load())
	}
	if l := b.Limit(); l > 60 {
		t.Fatalf("rate after SlowDown is %.0f/s, want about half of 100", l)
	}

	// at 50/s growing by 10/s (from up to 57/s after the jittered
	// backoffs) 300 take 3.5s and more; at the full rate 3s
	slow := stats(t, d, clk, 300)
	if slow < 3400*time.Millisecond {
		t.Fatalf("300 requests after a SlowDown took %v, want well over the 3s they take at the full rate", slow)
	}

	clk.advance(10 * time.Second)
	if l := b.Limit(); l != 100 {
		t.Fatalf("rate 10s after the last SlowDown is %.1f/s, want the configured 100", l)
	}
	if again := stats(t, d, clk, 200); again > 2100*time.Millisecond {
		t.Fatalf("200 requests after recovering took %v, want at most 2s", again)
	}
}

// TestRetriesBounded: a store that keeps answering SlowDown fails GC's
// call with its error after retries.
func TestRetriesBounded(t *testing.T) {
	b, _ := newTestBudget(Options{Rate: 100})
	th, d := throttledStore(t, b)
	th.SlowDown(1000)
	_, err := d.Stat(Mark(context.Background()), "/f")
	if !Throttled(err) {
		t.Fatalf("err = %v, want the store's SlowDown", err)
	}
	if th.Answered() != retries+1 {
		t.Fatalf("the store was asked %d times, want %d", th.Answered(), retries+1)
	}
	// Writer is not retried: an append cannot be replayed.
	th.SlowDown(1000)
	before := th.Answered()
	if _, err := d.Writer(Mark(context.Background()), "/w", false); !Throttled(err) {
		t.Fatalf("Writer: err = %v, want SlowDown", err)
	}
	if n := th.Answered() - before; n != 1 {
		t.Fatalf("Writer asked the store %d times, want 1", n)
	}
}

// TestClientCallsPassStraightThrough: with GC holding the one in-flight
// slot and the rate spent, a client's call goes straight to the store;
// its throttling answer goes up unretried, and slows GC.
func TestClientCallsPassStraightThrough(t *testing.T) {
	b, _ := newTestBudget(Options{Rate: 10, InFlight: 1})
	th, d := throttledStore(t, b)
	held, release := make(chan struct{}), make(chan struct{})
	th.Before = func(ctx context.Context, method, path string) error {
		if Marked(ctx) && path == "/held" {
			close(held)
			<-release
		}
		return nil
	}
	gcDone := make(chan error)
	go func() {
		_, err := d.Stat(Mark(context.Background()), "/held")
		gcDone <- err
	}()
	<-held // GC holds the only slot

	clientDone := make(chan error)
	go func() {
		_, err := d.Stat(context.Background(), "/f")
		clientDone <- err
	}()
	select {
	case err := <-clientDone:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("a client call waited behind GC's in-flight slot")
	}
	close(release)
	<-gcDone
	if n := b.Stats().Requests.Load(); n != 1 {
		t.Fatalf("the budget counted %d requests, want GC's 1 (clients are not counted)", n)
	}

	th.Before, th.Match = nil, nil
	th2 := storagetest.NewThrottler(inmemory.New())
	th2.SlowDown(1)
	d2 := Wrap(th2, b)
	if _, err := d2.Stat(context.Background(), "/f"); !Throttled(err) {
		t.Fatalf("client err = %v, want the store's SlowDown unchanged", err)
	}
	if th2.Answered() != 1 || b.Stats().Retries.Load() != 0 {
		t.Fatalf("a client call was retried (asked %d times)", th2.Answered())
	}
	if b.Stats().Clients.Load() != 1 || b.Limit() > 5 {
		t.Fatalf("a client's SlowDown: clients %d, GC rate %.1f; want 1 and GC halved to 5", b.Stats().Clients.Load(), b.Limit())
	}
}

// TestInFlightBound: never more than InFlight GC calls in the store.
func TestInFlightBound(t *testing.T) {
	b, _ := newTestBudget(Options{InFlight: 2})
	th, d := throttledStore(t, b)
	var cur, peak atomic.Int64
	gate, entered := make(chan struct{}), make(chan struct{}, 8)
	th.Before = func(context.Context, string, string) error {
		entered <- struct{}{}
		n := cur.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		<-gate
		cur.Add(-1)
		return nil
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = d.Stat(Mark(context.Background()), "/f")
		}()
	}
	<-entered
	<-entered // two in the store; the other six must wait for a slot
	for i := range 8 {
		gate <- struct{}{}
		if i < 6 {
			<-entered
		}
	}
	wg.Wait()
	if p := peak.Load(); p != 2 {
		t.Fatalf("peak GC calls in flight %d, want 2", p)
	}
}

// TestNoRateCutsFromWhatGCDid: with no configured rate, a SlowDown limits
// GC to half the rate it had, and the limit is lifted once it grew back.
func TestNoRateCutsFromWhatGCDid(t *testing.T) {
	b, clk := newTestBudget(Options{})
	th, d := throttledStore(t, b)
	stats(t, d, clk, 40) // 40 in this second, no wait
	th.SlowDown(1)
	stats(t, d, clk, 1)
	if l := b.Limit(); l != 20.5 && l != 20 && (l < 19 || l > 22) {
		t.Fatalf("limit after SlowDown %.1f, want about half of 41/s", l)
	}
	clk.advance(6 * time.Second)
	if l := b.Limit(); l != 0 {
		t.Fatalf("limit 6s later %.1f, want none again", l)
	}
}

// TestWalkCharged: a GC walk is charged a request per 1,000 entries.
func TestWalkCharged(t *testing.T) {
	b, _ := newTestBudget(Options{Rate: 1000, InFlight: 1})
	mem := inmemory.New()
	for i := range 2500 {
		if err := mem.PutContent(context.Background(), fmt.Sprintf("/d/%d", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	d := Wrap(mem, b)
	n := 0
	err := d.Walk(Mark(context.Background()), "/d", func(fi storagedriver.FileInfo) error {
		n++
		// a call from the walk's callback: the walk holds no slot
		_, err := d.Stat(Mark(context.Background()), fi.Path())
		return err
	})
	if err != nil || n != 2500 {
		t.Fatalf("walk: %d entries, %v", n, err)
	}
	if got := b.Stats().Requests.Load(); got != 1+2+2500 {
		t.Fatalf("requests %d, want 2503 (1 walk + 2 pages + 2500 Stats)", got)
	}
}

type codeErr struct{ code string }

func (e codeErr) Error() string { return e.code }
func (e codeErr) Code() string  { return e.code }

type retryable bool

func (r retryable) Error() string        { return "retryable" }
func (r retryable) RetryableError() bool { return bool(r) }

func TestThrottled(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{storagedriver.Error{DriverName: "s3aws", Detail: storagetest.SlowDownError{}}, true},
		{fmt.Errorf("walk: %w", storagedriver.Error{DriverName: "s3aws", Detail: codeErr{"RequestLimitExceeded"}}), true},
		{codeErr{"Throttling"}, true},
		{codeErr{"NoSuchKey"}, false},
		{&googleapi.Error{Code: 429}, true},
		{&googleapi.Error{Code: 404}, false},
		{&azcore.ResponseError{StatusCode: 503}, true},
		{&azcore.ResponseError{StatusCode: 500, ErrorCode: "ServerBusy"}, true},
		{retryable(true), true},
		{retryable(false), false},
		{storagedriver.PathNotFoundError{Path: "/x"}, false},
		{errors.New("503"), false},
		{nil, false},
	} {
		if got := Throttled(tc.err); got != tc.want {
			t.Errorf("Throttled(%#v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
