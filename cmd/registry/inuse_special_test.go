//go:build unix

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Only regular files are read: a symlink to /dev/zero used to run the scan
// out of memory. It fails at once, naming the file.
func TestInUseScanDeviceSymlink(t *testing.T) {
	url := noUploads(t)
	dir := writeTree(t, map[string]string{"good.yaml": podYAML("r.example/team/app:v1")})
	zero := filepath.Join(dir, "zero.yaml")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	for arg, want := range map[string]string{
		zero: zero + ": a character device, not a regular file",
		dir:  zero + ": a symlink to /dev/zero, a character device, not a regular file",
	} {
		start := time.Now()
		_, errOut, code := runInUse(t, "", "scan", arg, "--url", url, "--source", "prod")
		if code != exitRejected || !strings.Contains(errOut, want) {
			t.Errorf("scan %s: exit %d %q, want %d and %q", arg, code, errOut, exitRejected, want)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("scan %s took %v", arg, d)
		}
	}
}

// A FIFO fails the scan instead of hanging it, named as an argument, found
// by a walk, or listed by a kustomization.
func TestInUseScanFIFO(t *testing.T) {
	url := noUploads(t)
	for _, tc := range []struct {
		name      string
		files     map[string]string
		fifo, arg string
		want      string // after the directory
	}{
		{"argument", nil, "deploy.yaml", "deploy.yaml", "/deploy.yaml: a named pipe (FIFO), not a regular file"},
		{"walk", map[string]string{"good.yaml": podYAML("r.example/a:1")}, "apps/deploy.yaml", ".", "/apps/deploy.yaml: a named pipe (FIFO), not a regular file"},
		{"kustomization", map[string]string{"k/kustomization.yaml": "resources: [deploy.yaml]\n"}, "k/deploy.yaml", "k",
			`/k/kustomization.yaml: resource "deploy.yaml": a named pipe (FIFO), not a regular file`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeTree(t, tc.files)
			fifo := filepath.Join(dir, tc.fifo)
			if err := os.MkdirAll(filepath.Dir(fifo), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Mkfifo(fifo, 0o644); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			done := make(chan string, 1)
			go func() {
				_, errOut, code := runInUse(t, "", "scan", filepath.Join(dir, tc.arg), "--url", url, "--source", "prod")
				done <- fmt.Sprintf("exit %d: %s", code, errOut)
			}()
			select {
			case got := <-done:
				if want := fmt.Sprintf("exit %d: Error: in-use scan: %s%s", exitRejected, dir, tc.want); !strings.HasPrefix(got, want) {
					t.Fatalf("%s\nwant %s", got, want)
				}
			case <-ctx.Done():
				// a writer unblocks the scan's open, so its goroutine ends
				if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
					f.Close()
				}
				<-done
				t.Fatal("the scan hung on a FIFO")
			}
		})
	}
}
