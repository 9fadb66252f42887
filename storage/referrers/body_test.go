package referrers

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

func TestBodyCopy(t *testing.T) {
	for _, tc := range []struct {
		name               string
		body               string
		readAll            bool
		wantOver, complete bool
	}{
		{"read to its end", `{"schemaVersion":2}`, true, false, true},
		{"read in part", `{"schemaVersion":2}`, false, false, false},
		{"larger than a manifest may be", strings.Repeat("x", MaxManifestSize+1), true, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := CopyBody(io.NopCloser(strings.NewReader(tc.body)))
			var read []byte
			var err error
			if tc.readAll {
				read, err = io.ReadAll(b)
			} else {
				read = make([]byte, 4)
				_, err = io.ReadFull(b, read)
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(tc.body, string(read)) {
				t.Fatal("the reader did not get the body")
			}
			payload, over, complete := b.Copy()
			if over != tc.wantOver || complete != tc.complete {
				t.Fatalf("over %v complete %v, want %v %v", over, complete, tc.wantOver, tc.complete)
			}
			if !over && !bytes.Equal(payload, read) {
				t.Fatalf("copy %q, read %q", payload, read)
			}
			if over && len(payload) != 0 {
				t.Fatalf("a body over the limit kept %d bytes", len(payload))
			}
		})
	}
}
