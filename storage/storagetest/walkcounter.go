package storagetest

import (
	"context"
	"sync/atomic"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
)

// WalkCounter counts what one Walk call hides below the driver API: the
// entries it yields (on S3 or GCS a walk costs one list request per 1000
// of them) and, since it walks through itself, every Stat and List the walk
// makes and the names those Lists return. Counting calls alone would see
// one Walk.
type WalkCounter struct {
	storagedriver.StorageDriver
	Entries, Stats, Lists, Names atomic.Int64
}

// Walk walks through the counter.
func (w *WalkCounter) Walk(ctx context.Context, p string, f storagedriver.WalkFn, opts ...func(*storagedriver.WalkOptions)) error {
	return storagedriver.WalkFallback(ctx, w, p, func(fi storagedriver.FileInfo) error {
		w.Entries.Add(1)
		return f(fi)
	}, opts...)
}

// Stat counts and passes through.
func (w *WalkCounter) Stat(ctx context.Context, p string) (storagedriver.FileInfo, error) {
	w.Stats.Add(1)
	return w.StorageDriver.Stat(ctx, p)
}

// List counts the call and the names it returns.
func (w *WalkCounter) List(ctx context.Context, p string) ([]string, error) {
	names, err := w.StorageDriver.List(ctx, p)
	w.Lists.Add(1)
	w.Names.Add(int64(len(names)))
	return names, err
}

// Reset sets every count to zero.
func (w *WalkCounter) Reset() {
	for _, c := range []*atomic.Int64{&w.Entries, &w.Stats, &w.Lists, &w.Names} {
		c.Store(0)
	}
}
