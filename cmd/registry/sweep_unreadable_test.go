package main

import (
	"context"
	"errors"
	"os"
	"path"
	"strings"
	"testing"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/distribution/distribution/v3/registry/storage/driver/factory"
	"github.com/distribution/distribution/v3/registry/storage/driver/filesystem"

	"github.com/reclaim-registry/reclaim/storage/layout"
)

// unreadableFS is the filesystem driver with one directory (the
// "unreadable" parameter) that cannot be listed, as with wrong permissions,
// which tests running as root cannot set up with chmod.
type unreadableFS struct {
	storagedriver.StorageDriver
	dir string
}

func (u unreadableFS) List(ctx context.Context, p string) ([]string, error) {
	if p == u.dir {
		return nil, errors.New("permission denied")
	}
	return u.StorageDriver.List(ctx, p)
}

// Walk lists through List, so the walk meets the unreadable directory too.
func (u unreadableFS) Walk(ctx context.Context, p string, fn storagedriver.WalkFn, opts ...func(*storagedriver.WalkOptions)) error {
	return storagedriver.WalkFallback(ctx, u, p, fn, opts...)
}

type unreadableFSFactory struct{}

func (unreadableFSFactory) Create(_ context.Context, params map[string]any) (storagedriver.StorageDriver, error) {
	fs, err := filesystem.FromParameters(map[string]any{"rootdirectory": params["rootdirectory"]})
	if err != nil {
		return nil, err
	}
	dir, _ := params["unreadable"].(string)
	return unreadableFS{StorageDriver: fs, dir: dir}, nil
}

func init() { factory.Register("unreadablefs", unreadableFSFactory{}) }

// One shard that cannot be listed costs only its own blobs: the sweep goes
// on over the others, says which shard it could not read, and exits
// "partial"; nothing in that shard is taken for unreferenced.
func TestSweepSkipsAndReportsAnUnreadableShard(t *testing.T) {
	f := newSweepFixture(t)
	shard := path.Dir(layout.BlobDir(f.linked))
	cfg, err := os.ReadFile(f.config)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(cfg), "  filesystem:\n", "  unreadablefs:\n    unreadable: "+shard+"\n", 1)
	if err := os.WriteFile(f.config, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	const counts = "2 blobs, 0 linked, 1 unreferenced already queued, 1 unreferenced not queued"
	code, out, stderr := f.runWithStderr(t)
	if code != sweepExitPartial || !strings.Contains(out, counts) || !strings.Contains(stderr, shard) {
		t.Fatalf("dry run: exit %d, output %q, stderr %q", code, out, stderr)
	}
	if f.inQueue(t, f.lost) || !f.exists(f.lost) {
		t.Fatal("a dry run changed something")
	}
	code, out, stderr = f.runWithStderr(t, "--apply")
	if code != sweepExitPartial || !strings.Contains(out, counts) || !strings.Contains(stderr, shard) {
		t.Fatalf("--apply: exit %d, output %q, stderr %q", code, out, stderr)
	}
	if f.exists(f.lost) {
		t.Fatal("the unreferenced blob of a readable shard survived --apply")
	}
	if !f.exists(f.linked) || !f.exists(f.queued) {
		t.Fatal("--apply deleted a blob of the unreadable shard or a queued one")
	}
}
