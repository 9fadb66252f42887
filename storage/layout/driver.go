package layout

import (
	"context"
	"errors"
	"path"
	"slices"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
)

// IsNotFound reports whether err is a driver's "no such path".
func IsNotFound(err error) bool {
	return errors.As(err, new(storagedriver.PathNotFoundError))
}

// Listed reports whether the listing of p's directory names p. A driver's
// Walk leaves out what Stat cannot see (a dangling symlink); the listing
// still shows it, and such an entry must never be taken for "absent".
func Listed(ctx context.Context, d storagedriver.StorageDriver, p string) (bool, error) {
	names, err := d.List(ctx, path.Dir(p))
	if IsNotFound(err) {
		return false, nil
	}
	return slices.Contains(names, p), err
}
