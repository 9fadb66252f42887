package linkdb

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
)

// linkWriter is how a rebuild writes reverse links. A link it has put is
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

// probePath is where newLinkWriter checks that FilesystemRoot is d's root.
const probePath = "/reclaim/rebuild/root-probe"

// ErrWrongRoot means RebuildOptions.FilesystemRoot is not the root
// directory of the driver Rebuild was given (or the driver is not the
// filesystem driver): a file written under it is not what the driver reads.
var ErrWrongRoot = errors.New("linkdb: FilesystemRoot is not the filesystem driver's root directory")

// newLinkWriter returns the writer a rebuild uses: the filesystem writer
// when root is set (and is d's root, which it checks by writing a probe
// file there and reading it back through d), else the driver.
func newLinkWriter(ctx context.Context, d storagedriver.StorageDriver, root string) (linkWriter, error) {
	if root == "" || !haveSyncfs {
		return driverWriter{d}, nil
	}
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
type fsWriter struct {
	root   string
	prefix string // of temporary file names: unique to this writer
	seq    atomic.Uint64
	dir    *os.File // the root, open since before the first put
}

func newFSWriter(root string) (*fsWriter, error) {
	// syncfs reports the write-back errors of the filesystem since this
	// descriptor was opened, so it is opened before anything is written.
	dir, err := os.Open(root)
	if err != nil {
		return nil, fmt.Errorf("open filesystem root: %w", err)
	}
	return &fsWriter{root: root, prefix: randomHex(), dir: dir}, nil
}

func (w *fsWriter) full(path string) string { return filepath.Join(w.root, filepath.FromSlash(path)) }

func (w *fsWriter) put(_ context.Context, path string, content []byte) error {
	full := w.full(path)
	if err := os.MkdirAll(filepath.Dir(full), 0o777); err != nil {
		return err
	}
	// The same shape as the driver's temporary files
	// (<path>.<random>.tmp), which walks skip.
	tmp := fmt.Sprintf("%s.%s-%d.tmp", full, w.prefix, w.seq.Add(1))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
	if err != nil {
		return err
	}
	_, err = f.Write(content)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, full)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

func (w *fsWriter) barrier(context.Context) error {
	if err := syncfs(w.dir); err != nil {
		return fmt.Errorf("syncfs %s: %w", w.root, err)
	}
	return nil
}

func (w *fsWriter) close() error { return w.dir.Close() }

func randomHex() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
