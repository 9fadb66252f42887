package linkdb

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
	"github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
)

// A FilesystemRoot that is not the driver's root is refused before
// anything is written: links written there would not be the driver's.
func TestRebuildWrongFilesystemRoot(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	d := filesystem.New(filesystem.DriverParameters{RootDirectory: root, MaxThreads: 100})
	generate(t, d, small)
	for name, opts := range map[string]RebuildOptions{
		"another directory": {FilesystemRoot: t.TempDir()},
		"missing":           {FilesystemRoot: filepath.Join(root, "nope")},
	} {
		if _, err := Rebuild(ctx, d, opts); err == nil {
			t.Errorf("%s: rebuild ran", name)
		}
	}
	if _, err := Rebuild(ctx, inmemory.New(), RebuildOptions{FilesystemRoot: root}); !errors.Is(err, ErrWrongRoot) {
		t.Errorf("inmemory driver: %v, want ErrWrongRoot", err)
	}
	if _, ok, _ := LinkDBComplete(ctx, d); ok {
		t.Fatal("marked complete")
	}
	res, err := Rebuild(ctx, d, RebuildOptions{FilesystemRoot: root})
	if err != nil || !res.Complete || res.ReverseAdded != res.ForwardLinks {
		t.Fatalf("rebuild with the right root: %+v, %v", res, err)
	}
	if rep := verify(t, d); rep.ExitCode != ExitClean {
		t.Fatalf("verify: exit %d %+v", rep.ExitCode, rep.Counts)
	}
	// no probe and no temporary file left behind
	err = filepath.WalkDir(root, func(p string, e os.DirEntry, err error) error {
		if err == nil && !e.IsDir() && (filepath.Ext(p) == ".tmp" || filepath.Base(p) == filepath.Base(probePath)) {
			t.Errorf("left behind: %s", p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The filesystem writer replaces a link in one step, as PutContent does.
func TestFSWriterReplaces(t *testing.T) {
	ctx := context.Background()
	w, err := newFSWriter(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	for _, content := range []string{"bad", "sha256:good"} {
		if err := w.put(ctx, "/a/b/link", []byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.barrier(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(w.full("/a/b/link"))
	if err != nil || string(b) != "sha256:good" {
		t.Fatalf("%q %v", b, err)
	}
	if es, _ := os.ReadDir(w.full("/a/b")); len(es) != 1 {
		t.Fatalf("entries %v", es)
	}
}
