//go:build !linux

package linkdb

import (
	"context"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
)

// newFSLinkWriter is the driver where syncfs(2), the filesystem writer's
// barrier, is missing: a rebuild then writes through the driver, one
// durable write per link, FilesystemRoot or not.
func newFSLinkWriter(_ context.Context, d storagedriver.StorageDriver, _ string) (linkWriter, error) {
	return driverWriter{d}, nil
}

// readsOf is d: only Linux has the filesystem writer, and its reads.
func readsOf(_ linkWriter, d storagedriver.StorageDriver) storagedriver.StorageDriver { return d }
