package linkdb

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"time"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"golang.org/x/sys/unix"
)

// readsOf returns the driver a rebuild reads through: with the filesystem
// writer, one that reads the tree straight from the writer's open root
// (fsReads); otherwise d.
func readsOf(w linkWriter, d storagedriver.StorageDriver) storagedriver.StorageDriver {
	if fw, ok := w.(*fsWriter); ok {
		return &fsReads{StorageDriver: d, w: fw}
	}
	return d
}

// fsReads reads the filesystem driver's tree as the filesystem writer
// writes it: GetContent, Stat and List are the system calls they need,
// relative to the writer's open root, without what the driver adds to each
// call (its path check, a regexp; a tracing span; its semaphore; an
// *os.File). A first rebuild makes about three reads per link, in both
// phases, so that overhead was a large part of its time. Everything else,
// writes included (checkpoints, the marker), goes to the driver.
//
// Answers are the driver's (filesystem/driver.go): a missing path is a
// PathNotFoundError naming it, a directory's size is 0, a listing names
// each child as path/name; other errors are the system call's.
type fsReads struct {
	storagedriver.StorageDriver
	w *fsWriter
}

// rel is path relative to the root: "." for the root itself.
func rel(path string) string {
	r := strings.TrimLeft(filepath.Clean(filepath.FromSlash(path)), "/")
	if r == "" {
		return "."
	}
	return r
}

// fail turns a system call's error into the driver's.
func (r *fsReads) fail(op, path string, err error) error {
	if err == unix.ENOENT {
		return storagedriver.PathNotFoundError{Path: path, DriverName: r.Name()}
	}
	return &os.PathError{Op: op, Path: r.w.full(path), Err: err}
}

func (r *fsReads) open(path string, flags int) (int, error) {
	for {
		fd, err := unix.Openat(r.w.fd, rel(path), flags|unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

func (r *fsReads) GetContent(_ context.Context, path string) ([]byte, error) {
	fd, err := r.open(path, 0)
	if err != nil {
		return nil, r.fail("open", path, err)
	}
	defer unix.Close(fd)      //nolint:errcheck // read-only
	b := make([]byte, 0, 512) // a link is 72 bytes; a manifest a few KiB
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := unix.Read(fd, b[len(b):cap(b)])
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return nil, r.fail("read", path, err)
		case n == 0:
			return b, nil
		}
		b = b[:len(b)+n]
	}
}

func (r *fsReads) Stat(_ context.Context, path string) (storagedriver.FileInfo, error) {
	var st unix.Stat_t
	for {
		err := unix.Fstatat(r.w.fd, rel(path), &st, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, r.fail("stat", path, err)
		}
		break
	}
	fi := storagedriver.FileInfoFields{Path: path, IsDir: st.Mode&unix.S_IFMT == unix.S_IFDIR,
		ModTime: time.Unix(st.Mtim.Unix())}
	if !fi.IsDir {
		fi.Size = st.Size
	}
	return storagedriver.FileInfoInternal{FileInfoFields: fi}, nil
}

func (r *fsReads) List(_ context.Context, path string) ([]string, error) {
	fd, err := r.open(path, unix.O_DIRECTORY)
	if err != nil {
		return nil, r.fail("open", path, err)
	}
	defer unix.Close(fd) //nolint:errcheck // read-only
	// getdents64 on the descriptor, not an *os.File: no fcntl, no poller
	// check and no finalizer per listing (a first rebuild lists about two
	// directories per link).
	var names []string
	buf := make([]byte, 8<<10)
	for {
		n, err := unix.Getdents(fd, buf)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return nil, &os.PathError{Op: "readdirent", Path: r.w.full(path), Err: err}
		case n <= 0:
			keys := make([]string, len(names))
			for i, n := range names {
				keys[i] = filepath.Join(path, n)
			}
			return keys, nil
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names) // skips "." and ".."
	}
}
