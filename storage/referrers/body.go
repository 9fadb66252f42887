package referrers

import (
	"bytes"
	"io"
	"sync"
)

// BodyCopy passes a manifest PUT's body through to whoever reads it
// (Distribution) and keeps a copy of what was read, up to MaxManifestSize:
// a larger body is one Distribution refuses, so its copy is dropped. It is
// safe for concurrent use.
type BodyCopy struct {
	rc io.ReadCloser

	mu   sync.Mutex
	buf  bytes.Buffer
	eof  bool // read to its end
	over bool // longer than MaxManifestSize: copy dropped
}

// CopyBody wraps rc (nil: an empty body).
func CopyBody(rc io.ReadCloser) *BodyCopy {
	if rc == nil {
		rc = io.NopCloser(bytes.NewReader(nil))
	}
	return &BodyCopy{rc: rc}
}

func (b *BodyCopy) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.mu.Lock()
	defer b.mu.Unlock()
	if n > 0 && !b.over {
		if b.buf.Len()+n > MaxManifestSize {
			b.over = true
			b.buf = bytes.Buffer{}
		} else {
			b.buf.Write(p[:n])
		}
	}
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

// Close closes the body.
func (b *BodyCopy) Close() error { return b.rc.Close() }

// Copy returns what was read so far. over is true when the body passed
// MaxManifestSize (nothing is kept); complete when it was read to its end.
func (b *BodyCopy) Copy() (payload []byte, over, complete bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes()), b.over, b.eof
}
