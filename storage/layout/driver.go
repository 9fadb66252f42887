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

// What Probe finds at a link path that is not a link file.
const (
	ProblemDirectory = "a directory, not a link file"
	ProblemDangling  = "listed, but not found by stat (a dangling symlink?)"
)

// Probe looks at link path p by listing its directory, for when a walk or a
// read did not find a file there (a driver's Walk leaves out what Stat
// cannot see). present is false only when the listing has no such entry.
// When something is there, info is what Stat says of it (nil when Stat
// cannot see it) and problem names what is wrong: "" for a file,
// ProblemDirectory or ProblemDangling. Such an entry is never "absent".
func Probe(ctx context.Context, d storagedriver.StorageDriver, p string) (present bool, info storagedriver.FileInfo, problem string, err error) {
	for round := 0; ; round++ {
		if ok, err := Listed(ctx, d, p); err != nil || !ok {
			return false, nil, "", err
		}
		fi, err := d.Stat(ctx, p)
		switch {
		case IsNotFound(err) && round == 0:
			// Deleted (perhaps re-created) between the listing and the
			// stat, or there to stay: look once more.
			continue
		case IsNotFound(err):
			return true, nil, ProblemDangling, nil
		case err != nil:
			return false, nil, "", err
		case fi.IsDir():
			return true, fi, ProblemDirectory, nil
		}
		return true, fi, "", nil
	}
}
