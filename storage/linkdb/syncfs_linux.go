package linkdb

import (
	"os"

	"golang.org/x/sys/unix"
)

// haveSyncfs says whether the filesystem writer's barrier (syncfs) exists.
const haveSyncfs = true

// syncfs makes everything written to the filesystem holding f durable
// (syncfs(2)); since Linux 5.8 it also reports the write-back errors seen
// on that filesystem since f was opened.
func syncfs(f *os.File) error { return unix.Syncfs(int(f.Fd())) }
