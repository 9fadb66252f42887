package storagetest

import (
	"context"
	"sync/atomic"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
)

// SlowDownError is S3's answer to a request rate it refuses: HTTP 503 with
// the code SlowDown, in the shape the AWS SDK's errors have (Code and
// StatusCode), wrapped by Throttler in storagedriver.Error as a driver
// wraps what the SDK returned.
type SlowDownError struct{}

func (SlowDownError) Error() string {
	return "SlowDown: Please reduce your request rate. status code: 503"
}
func (SlowDownError) Code() string    { return "SlowDown" }
func (SlowDownError) StatusCode() int { return 503 }

// Throttler is a driver that answers SlowDown for a while: to the next n
// calls Match selects once SlowDown(n) was called, the others pass.
type Throttler struct {
	HookDriver
	// Match selects the calls a throttled store refuses; nil: every call.
	Match    func(ctx context.Context, method, path string) bool
	left     atomic.Int64
	answered atomic.Int64
	passed   atomic.Int64
}

var _ storagedriver.StorageDriver = (*Throttler)(nil)

// NewThrottler wraps d; it throttles nothing until SlowDown.
func NewThrottler(d storagedriver.StorageDriver) *Throttler {
	t := &Throttler{}
	t.HookDriver = HookDriver{StorageDriver: d, Before: t.before}
	return t
}

// SlowDown makes the next n matching calls fail with SlowDownError.
func (t *Throttler) SlowDown(n int) { t.left.Store(int64(n)) }

// Answered is how many calls got SlowDown; Passed how many matching calls
// went through.
func (t *Throttler) Answered() int64 { return t.answered.Load() }
func (t *Throttler) Passed() int64   { return t.passed.Load() }

func (t *Throttler) before(ctx context.Context, method, path string) error {
	if t.Match != nil && !t.Match(ctx, method, path) {
		return nil
	}
	for {
		n := t.left.Load()
		if n <= 0 {
			t.passed.Add(1)
			return nil
		}
		if t.left.CompareAndSwap(n, n-1) {
			t.answered.Add(1)
			return storagedriver.Error{DriverName: "s3aws", Detail: SlowDownError{}}
		}
	}
}
