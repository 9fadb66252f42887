//go:build !linux

package linkdb

import (
	"errors"
	"os"
)

// haveSyncfs is false where syncfs(2) is missing: a rebuild then writes
// through the driver, one durable write per link, FilesystemRoot or not.
const haveSyncfs = false

func syncfs(*os.File) error { return errors.ErrUnsupported }
