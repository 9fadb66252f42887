package inuse

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// DefaultMaxFileSize is the default limit on one scanned file or stream.
const DefaultMaxFileSize = 16 << 20

// Limits bound what a scan reads: the scanner is pointed at trees it does
// not control (a repository checkout), and "read anything" meant a symlink
// to /dev/zero ran out of memory and a FIFO hung the scan.
type Limits struct {
	// MaxFileSize is the most bytes read from one file or stream
	// (kustomization files included); 0 means DefaultMaxFileSize.
	MaxFileSize int64
}

func (l Limits) maxFileSize() int64 {
	if l.MaxFileSize <= 0 {
		return DefaultMaxFileSize
	}
	return l.MaxFileSize
}

// tooLarge is the error for name when it passes the limit.
func (l Limits) tooLarge(name string) error {
	return fmt.Errorf("%w: %s: larger than the %s limit on a scanned file", ErrTooLarge, name, byteSize(l.maxFileSize()))
}

// byteSize prints n in the largest binary unit that divides it.
func byteSize(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// openRegular opens the file at p (following symlinks) if it is a regular
// file within the limit, and fails naming p otherwise. It opens without
// blocking and checks what it opened again: a FIFO swapped in after the
// first check must fail the scan, not hang it.
func (l Limits) openRegular(p string) (*os.File, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if err := l.checkRegular(p, fi); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	opened, err := f.Stat()
	if err == nil && !os.SameFile(fi, opened) {
		err = fmt.Errorf("%w: %s: changed while it was opened", ErrInvalid, p)
	}
	if err == nil {
		err = l.checkRegular(p, opened)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func (l Limits) checkRegular(p string, fi fs.FileInfo) error {
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%w: %s: %s, not a regular file", ErrInvalid, p, modeName(fi.Mode()))
	}
	if fi.Size() > l.maxFileSize() {
		return l.tooLarge(p)
	}
	return nil
}

func modeName(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	}
	return "a special file"
}

// readFile reads the regular file at p within the limit.
func (l Limits) readFile(p string) ([]byte, error) {
	f, err := l.openRegular(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(l.reader(p, f)); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// reader reads r and fails naming name once more than the limit was read
// (a file that grows after its size was checked, a stream).
func (l Limits) reader(name string, r io.Reader) io.Reader {
	return &boundedReader{r: r, left: l.maxFileSize(), err: l.tooLarge(name)}
}

type boundedReader struct {
	r    io.Reader
	left int64
	err  error
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		return n, b.err
	}
	return n, err
}

// documents reads a YAML stream one document at a time, split at its
// "---" lines (as Kubernetes' own YAML reader does), so a scan holds one
// document, not the stream.
type documents struct {
	r    *bufio.Reader
	line int // lines read so far
	body bytes.Buffer
	eof  bool
}

func newDocuments(r io.Reader) *documents {
	return &documents{r: bufio.NewReaderSize(r, 64<<10)}
}

// next returns the next document; its body is valid until the next call.
// ok is false after the last document.
func (d *documents) next() (doc document, ok bool, err error) {
	if d.eof {
		return document{}, false, nil
	}
	d.body.Reset()
	start := d.line + 1
	midLine := false // the last read stopped inside a long line
	for {
		ln, err := d.r.ReadSlice('\n')
		full := err == bufio.ErrBufferFull
		if err != nil && !full && err != io.EOF {
			return document{}, false, err
		}
		if !midLine && !full && len(ln) > 0 && isSeparator(ln) {
			d.line++
			return document{body: d.body.Bytes(), line: start}, true, nil
		}
		d.body.Write(ln)
		if !full && len(ln) > 0 {
			d.line++
		}
		midLine = full
		if err == io.EOF {
			d.eof = true
			return document{body: d.body.Bytes(), line: start}, true, nil
		}
	}
}
