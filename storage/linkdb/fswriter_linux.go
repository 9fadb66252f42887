package linkdb

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"golang.org/x/sys/unix"
)

// newFSLinkWriter returns the filesystem writer on root, once it has
// checked that root is d's root by writing a probe file there and reading
// it back through d.
func newFSLinkWriter(ctx context.Context, d storagedriver.StorageDriver, root string) (linkWriter, error) {
	if d.Name() != "filesystem" {
		return nil, fmt.Errorf("%w: the driver is %q", ErrWrongRoot, d.Name())
	}
	w, err := newFSWriter(root)
	if err != nil {
		return nil, err
	}
	if err := checkRoot(ctx, d, w); err != nil {
		_ = w.close()
		return nil, err
	}
	return w, nil
}

// checkRoot writes a random probe through w and reads it through d.
func checkRoot(ctx context.Context, d storagedriver.StorageDriver, w *fsWriter) error {
	want := []byte(randomHex() + "\n")
	if err := w.put(ctx, probePath, want); err != nil {
		return fmt.Errorf("write %s under %s: %w", probePath, w.root, err)
	}
	got, err := d.GetContent(ctx, probePath)
	_ = os.Remove(w.full(probePath))
	if err != nil || !bytes.Equal(got, want) {
		return fmt.Errorf("%w: %s written under %s does not read back through the driver (%v)", ErrWrongRoot, probePath, w.root, err)
	}
	return nil
}

// fsWriter writes reverse links straight into the filesystem driver's root,
// as the driver's PutContent does (a temporary file in the same directory,
// renamed over the link, so a reader sees the old file or the new one,
// never a partial one) but without its two fsyncs per file. Its barrier is
// one syncfs(2) of the root's filesystem (fsWriter's syncfs): it makes every
// file, rename and new directory written so far durable, where fsyncing
// each file would also need an fsync of each directory a link created and
// of its parent.
//
// A first rebuild writes a link per forward link, so put makes only the
// system calls a link needs, relative to the open root: no Stat per
// directory (os.MkdirAll), no Lstat before the rename (os.Rename), no
// poller registration of the temporary file (os.OpenFile).
type fsWriter struct {
	root   string
	prefix string // of temporary file names: unique to this writer
	seq    atomic.Uint64
	dir    *os.File // the root, open since before the first put
	fd     int      // dir's descriptor, which put's paths are relative to
}

func newFSWriter(root string) (*fsWriter, error) {
	// syncfs reports the write-back errors of the filesystem since this
	// descriptor was opened, so it is opened before anything is written.
	dir, err := os.Open(root)
	if err != nil {
		return nil, fmt.Errorf("open filesystem root: %w", err)
	}
	return &fsWriter{root: root, prefix: randomHex(), dir: dir, fd: int(dir.Fd())}, nil
}

func (w *fsWriter) full(path string) string { return filepath.Join(w.root, filepath.FromSlash(path)) }

func (w *fsWriter) put(_ context.Context, path string, content []byte) error {
	rel := strings.TrimLeft(filepath.Clean(filepath.FromSlash(path)), "/")
	// The same shape as the driver's temporary files
	// (<path>.<random>.tmp), which walks skip.
	tmp := rel + "." + w.prefix + "-" + strconv.FormatUint(w.seq.Add(1), 10) + ".tmp"
	// Most links are new in directories that are new too: try the file
	// first, and create what is missing only when it says so.
	fd, err := w.create(tmp)
	if errors.Is(err, unix.ENOENT) {
		if err = w.mkdirs(filepath.Dir(rel)); err == nil {
			fd, err = w.create(tmp)
		}
	}
	if err != nil {
		return w.pathErr("open", tmp, err)
	}
	n, err := unix.Write(fd, content)
	if err == nil && n < len(content) {
		err = io.ErrShortWrite
	}
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err != nil {
		_ = unix.Unlinkat(w.fd, tmp, 0)
		return w.pathErr("write", tmp, err)
	}
	if err := unix.Renameat(w.fd, tmp, w.fd, rel); err != nil {
		_ = unix.Unlinkat(w.fd, tmp, 0)
		return w.pathErr("rename", tmp, err)
	}
	return nil
}

func (w *fsWriter) create(rel string) (int, error) {
	for {
		fd, err := unix.Openat(w.fd, rel, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o666)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// mkdirs creates directory rel and those above it that are missing, from
// the deepest that exists down (three for a blob's first reverse link:
// _repositories, the repository, the kind). A directory that exists is
// fine: a concurrent put made it, or it was there (if it is a file, the
// create that follows fails).
func (w *fsWriter) mkdirs(rel string) error {
	if rel == "." || rel == "" {
		return nil // the root, open since newFSWriter
	}
	err := unix.Mkdirat(w.fd, rel, 0o777)
	if err == unix.ENOENT {
		if err = w.mkdirs(filepath.Dir(rel)); err == nil {
			err = unix.Mkdirat(w.fd, rel, 0o777)
		}
	}
	if err == nil || err == unix.EEXIST {
		return nil
	}
	return w.pathErr("mkdir", rel, err)
}

// pathErr names the full path of rel, once.
func (w *fsWriter) pathErr(op, rel string, err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return err
	}
	return &os.PathError{Op: op, Path: filepath.Join(w.root, rel), Err: err}
}

func (w *fsWriter) barrier(context.Context) error {
	if err := syncfs(w.dir); err != nil {
		return fmt.Errorf("syncfs %s: %w", w.root, err)
	}
	return nil
}

func (w *fsWriter) close() error { return w.dir.Close() }

// syncfs makes everything written to the filesystem holding f durable
// (syncfs(2)); since Linux 5.8 it also reports the write-back errors seen
// on that filesystem since f was opened.
func syncfs(f *os.File) error { return unix.Syncfs(int(f.Fd())) }
