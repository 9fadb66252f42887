package budget

import (
	"context"
	"io"
	"net/http"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
)

// walkPage is how many entries a walk visits per storage request it is
// charged: one S3 list page.
const walkPage = 1000

// Wrap returns d with b around it (d itself when b is nil).
func Wrap(d storagedriver.StorageDriver, b *Budget) storagedriver.StorageDriver {
	if b == nil {
		return d
	}
	return &driver{StorageDriver: d, b: b}
}

type driver struct {
	storagedriver.StorageDriver
	b *Budget
}

// call runs one storage request: a client's straight through (its
// throttling answer noted), GC's within the budget, retried on a
// throttling answer when retry.
func call[T any](ctx context.Context, b *Budget, retry bool, f func() (T, error)) (T, error) {
	if !Marked(ctx) {
		v, err := f()
		if err != nil && Throttled(err) {
			b.throttled(true)
		}
		return v, err
	}
	for n := 0; ; n++ {
		release, err := b.take(ctx)
		if err != nil {
			var zero T
			return zero, err
		}
		v, err := f()
		release()
		if err == nil || !Throttled(err) {
			return v, err
		}
		b.throttled(false)
		if !retry || n == retries {
			return v, err
		}
		if berr := b.backoff(ctx, n); berr != nil {
			return v, err
		}
		b.stats.Retries.Add(1)
		metricRetries.Inc()
	}
}

func callErr(ctx context.Context, b *Budget, retry bool, f func() error) error {
	_, err := call(ctx, b, retry, func() (struct{}, error) { return struct{}{}, f() })
	return err
}

func (d *driver) GetContent(ctx context.Context, path string) ([]byte, error) {
	return call(ctx, d.b, true, func() ([]byte, error) { return d.StorageDriver.GetContent(ctx, path) })
}

func (d *driver) PutContent(ctx context.Context, path string, content []byte) error {
	return callErr(ctx, d.b, true, func() error { return d.StorageDriver.PutContent(ctx, path, content) })
}

// Reader: the open is the request; the stream is not held in flight.
func (d *driver) Reader(ctx context.Context, path string, offset int64) (io.ReadCloser, error) {
	return call(ctx, d.b, true, func() (io.ReadCloser, error) { return d.StorageDriver.Reader(ctx, path, offset) })
}

// Writer is not retried: an append resumes state a retry could not.
func (d *driver) Writer(ctx context.Context, path string, a bool) (storagedriver.FileWriter, error) {
	return call(ctx, d.b, false, func() (storagedriver.FileWriter, error) { return d.StorageDriver.Writer(ctx, path, a) })
}

func (d *driver) Stat(ctx context.Context, path string) (storagedriver.FileInfo, error) {
	return call(ctx, d.b, true, func() (storagedriver.FileInfo, error) { return d.StorageDriver.Stat(ctx, path) })
}

func (d *driver) List(ctx context.Context, path string) ([]string, error) {
	return call(ctx, d.b, true, func() ([]string, error) { return d.StorageDriver.List(ctx, path) })
}

// Move is not retried: a move that landed before its answer was lost
// would fail the second time for the source it already moved.
func (d *driver) Move(ctx context.Context, src, dst string) error {
	return callErr(ctx, d.b, false, func() error { return d.StorageDriver.Move(ctx, src, dst) })
}

func (d *driver) Delete(ctx context.Context, path string) error {
	return callErr(ctx, d.b, true, func() error { return d.StorageDriver.Delete(ctx, path) })
}

func (d *driver) RedirectURL(r *http.Request, path string) (string, error) {
	return d.StorageDriver.RedirectURL(r, path) // signs a URL: no request
}

// Walk of GC is charged one request at its start and one per walkPage
// entries it visits (S3 lists a page of 1,000 keys per request), waited
// for between entries. It holds no in-flight slot: its callback makes
// calls of its own, which would wait for a slot the walk holds. A walk is
// not retried (its callback has seen entries), but a throttling answer
// still cuts the rate.
func (d *driver) Walk(ctx context.Context, path string, f storagedriver.WalkFn, opts ...func(*storagedriver.WalkOptions)) error {
	if !Marked(ctx) {
		err := d.StorageDriver.Walk(ctx, path, f, opts...)
		if err != nil && Throttled(err) {
			d.b.throttled(true)
		}
		return err
	}
	if err := d.b.charge(ctx); err != nil {
		return err
	}
	seen := 0
	err := d.StorageDriver.Walk(ctx, path, func(fi storagedriver.FileInfo) error {
		if seen++; seen%walkPage == 0 {
			if err := d.b.charge(ctx); err != nil {
				return err
			}
		}
		return f(fi)
	}, opts...)
	if err != nil && Throttled(err) {
		d.b.throttled(false)
	}
	return err
}
