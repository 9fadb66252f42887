package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/redisstate"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/linkdb"
	"github.com/redis/go-redis/v9"
)

// sweepFixture is a storage root with three blobs: one a repository links,
// one nobody links that is queued, one nobody links that is not.
type sweepFixture struct {
	config               string
	root                 string
	mini                 *miniredis.Miniredis
	linked, queued, lost digest.Digest
}

func newSweepFixture(t *testing.T) *sweepFixture {
	t.Helper()
	f := &sweepFixture{root: t.TempDir(), mini: miniredis.RunT(t)}
	ctx := context.Background()
	raw, err := filesystem.FromParameters(map[string]any{"rootdirectory": f.root})
	if err != nil {
		t.Fatal(err)
	}
	put := func(content string) digest.Digest {
		d := digest.FromString(content)
		if err := raw.PutContent(ctx, layout.BlobDataPath(d), []byte(content)); err != nil {
			t.Fatal(err)
		}
		return d
	}
	f.linked, f.queued, f.lost = put("linked"), put("queued"), put("lost when redis lost its data")
	if err := linkdb.NewReverseLinks(raw).Put(ctx, f.linked, reclaim.RepoLink{Repo: "app", Kind: reclaim.LinkLayer}); err != nil {
		t.Fatal(err)
	}
	if err := linkdb.MarkLinkDBComplete(ctx, raw, time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	rc := redis.NewClient(&redis.Options{Addr: f.mini.Addr()})
	defer rc.Close()
	// recording for an hour already: GC may trust the tracker
	rc.Set(ctx, "reclaim:since", strconv.FormatInt(time.Now().Add(-time.Hour).UnixMilli(), 10), 0)
	if err := redisstate.NewQueue(rc, "", 0).Enqueue(ctx, time.Hour, f.queued); err != nil {
		t.Fatal(err)
	}
	f.config = filepath.Join(t.TempDir(), "config.yml")
	cfg := fmt.Sprintf(`version: 0.1
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
middleware:
  storage:
    - name: reclaim
      options:
        window: 1s
        dedup: 10ms
        redis:
          addrs: [%s]
        gc:
          enabled: true
`, f.root, f.mini.Addr())
	if err := os.WriteFile(f.config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *sweepFixture) run(t *testing.T, args ...string) (int, string) {
	t.Helper()
	code, out, _ := f.runWithStderr(t, args...)
	return code, out
}

func (f *sweepFixture) runWithStderr(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	code = -1
	old := sweepExit
	sweepExit = func(c int) { code = c }
	defer func() { sweepExit = old }()
	cmd := newGCSweepCommand()
	var out, errb bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	cmd.SetArgs(append(args, f.config))
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	t.Logf("sweep %v: exit %d\n%s%s", args, code, out.String(), errb.String())
	return code, out.String(), errb.String()
}

func (f *sweepFixture) exists(d digest.Digest) bool {
	_, err := os.Stat(filepath.Join(f.root, layout.BlobDataPath(d)))
	return err == nil
}

func (f *sweepFixture) inQueue(t *testing.T, d digest.Digest) bool {
	rc := redis.NewClient(&redis.Options{Addr: f.mini.Addr()})
	defer rc.Close()
	ok, err := redisstate.NewQueue(rc, "", 0).Contains(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

func TestSweepDryRunChangesNothing(t *testing.T) {
	f := newSweepFixture(t)
	code, out := f.run(t, "-v")
	if code != sweepExitOK || !strings.Contains(out, "3 blobs, 1 linked, 1 unreferenced already queued, 1 unreferenced not queued") ||
		!strings.Contains(out, f.lost.String()) {
		t.Fatalf("exit %d, output %q", code, out)
	}
	if f.inQueue(t, f.lost) || !f.exists(f.lost) {
		t.Fatal("a dry run changed something")
	}
}

func TestSweepEnqueue(t *testing.T) {
	f := newSweepFixture(t)
	if code, out := f.run(t, "--enqueue"); code != sweepExitOK || !strings.Contains(out, "1 enqueued") {
		t.Fatalf("exit %d, output %q", code, out)
	}
	if !f.inQueue(t, f.lost) || f.inQueue(t, f.linked) || !f.exists(f.lost) {
		t.Fatal("enqueue queued the wrong blobs or deleted one")
	}
}

func TestSweepApplyDeletesOnlyTheUnreferenced(t *testing.T) {
	f := newSweepFixture(t)
	code, out := f.run(t, "--apply")
	if code != sweepExitOK || !strings.Contains(out, "unreferenced 1") {
		t.Fatalf("exit %d, output %q", code, out)
	}
	if f.exists(f.lost) {
		t.Fatal("the unreferenced, unqueued blob survived --apply")
	}
	if !f.exists(f.linked) || !f.exists(f.queued) {
		t.Fatal("--apply deleted a linked or a queued blob")
	}
}

func TestSweepApplyFailsClosedWithoutTrustedRedis(t *testing.T) {
	f := newSweepFixture(t)
	rc := redis.NewClient(&redis.Options{Addr: f.mini.Addr()})
	rc.Del(context.Background(), "reclaim:since")
	rc.Close()
	// Open sets a fresh epoch: younger than the window, not trusted.
	code, _ := f.run(t, "--apply")
	if code != sweepExitPartial || !f.exists(f.lost) {
		t.Fatalf("exit %d; blob exists: %v", code, f.exists(f.lost))
	}
}
