package linkdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
)

// linkWriter is how a rebuild writes reverse links and referrers index
// entries (writesThrough). A link it has put is
// readable at once but durable only after the next barrier returns: the
// rebuild calls barrier before every checkpoint it saves and before the
// completeness marker, so neither ever covers a link a crash could lose.
type linkWriter interface {
	put(ctx context.Context, path string, content []byte) error
	barrier(ctx context.Context) error
	close() error
}

// driverWriter writes through the driver: each PutContent is durable when
// it returns (the filesystem driver fsyncs the file and its directory, an
// object store's PUT is durable), so its barrier has nothing to do. It is
// what the middleware's own writes go through, and what a rebuild uses on
// every driver but the filesystem one with a FilesystemRoot.
type driverWriter struct{ d storagedriver.StorageDriver }

func (w driverWriter) put(ctx context.Context, path string, content []byte) error {
	return w.d.PutContent(ctx, path, content)
}

func (driverWriter) barrier(context.Context) error { return nil }
func (driverWriter) close() error                  { return nil }

// writesThrough is d with its PutContent going to w: what a rebuild hands
// the referrers index, so that the entries it adds are written as its
// reverse links are (on the filesystem without a per-file fsync) and made
// durable by the same barriers. Everything else is d's.
type writesThrough struct {
	storagedriver.StorageDriver
	w linkWriter
}

func (d writesThrough) PutContent(ctx context.Context, path string, content []byte) error {
	return d.w.put(ctx, path, content)
}

// probePath is where newLinkWriter checks that FilesystemRoot is d's root.
const probePath = "/reclaim/rebuild/root-probe"

// ErrWrongRoot means RebuildOptions.FilesystemRoot is not the root
// directory of the driver Rebuild was given (or the driver is not the
// filesystem driver): a file written under it is not what the driver reads.
var ErrWrongRoot = errors.New("linkdb: FilesystemRoot is not the filesystem driver's root directory")

// newLinkWriter returns the writer a rebuild uses: the filesystem writer
// when root is set (newFSLinkWriter), else the driver.
func newLinkWriter(ctx context.Context, d storagedriver.StorageDriver, root string) (linkWriter, error) {
	if root == "" {
		return driverWriter{d}, nil
	}
	return newFSLinkWriter(ctx, d, root)
}

func randomHex() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
