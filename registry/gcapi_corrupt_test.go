package registry_test

import (
	"context"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	storagemiddleware "github.com/distribution/distribution/v3/registry/storage/driver/middleware"
	ggcrv1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/gc/collector"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/linkdb"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

// Corrupt storage must never look like unreferenced (issue 16): whatever
// sits at a link or manifest path that is not what Distribution writes
// there keeps what it could protect, the dry run announces exactly what the
// real run does (or both abort for the same reason), and `linkdb verify`
// reports it.

// corruptWindow is the protection window of these registries: short, so
// that thirty fresh registries fit in a few seconds each.
const corruptWindow = 250 * time.Millisecond

// readFaults fails every read (GetContent, Reader) of chosen paths with a
// permission error, the way a file without read permission fails on a
// filesystem. Tests run as root, who reads any file whatever its mode, so
// the fault is injected at the driver instead: it is the same error value
// the filesystem driver returns.
type readFaults struct {
	mu    sync.Mutex
	paths map[string]bool
}

func (f *readFaults) add(p string) {
	f.mu.Lock()
	f.paths[p] = true
	f.mu.Unlock()
}

func (f *readFaults) wrap(d storagedriver.StorageDriver) storagedriver.StorageDriver {
	return &storagetest.HookDriver{StorageDriver: d, Before: func(_ context.Context, method, p string) error {
		if method != "GetContent" && method != "Reader" {
			return nil
		}
		f.mu.Lock()
		bad := f.paths[p]
		f.mu.Unlock()
		if bad {
			return &fs.PathError{Op: "open", Path: p, Err: fs.ErrPermission}
		}
		return nil
	}}
}

// faultsByID lets each registry find its own readFaults: the "readfault"
// storage middleware is registered once per process, and its "id" option
// names the test.
var faultsByID sync.Map

func init() {
	_ = storagemiddleware.Register("readfault", func(_ context.Context, d storagedriver.StorageDriver, opts map[string]any) (storagedriver.StorageDriver, error) {
		id, _ := opts["id"].(string)
		f, ok := faultsByID.Load(id)
		if !ok {
			return nil, fmt.Errorf("readfault: no faults registered for %q", id)
		}
		return f.(*readFaults).wrap(d), nil
	})
}

type corruptRegistry struct {
	*gcRegistry
	faults *readFaults
}

// startCorrupt starts a registry with the reclaim middleware over the
// "readfault" middleware (so GC reads through the faults), with a complete
// link database. The tracker starts recording now: buildScene's wait after
// the pushes covers a full window of it.
func startCorrupt(t *testing.T) *corruptRegistry {
	t.Helper()
	f := &readFaults{paths: map[string]bool{}}
	id := t.Name()
	faultsByID.Store(id, f)
	t.Cleanup(func() { faultsByID.Delete(id) })
	r := registrytest.Start(t,
		registrytest.WithStorageMiddleware("readfault", map[string]any{"id": id}),
		registrytest.WithStorageMiddleware("reclaim", reclaimOptions(t, corruptWindow, "")))
	return &corruptRegistry{gcRegistry: completeGC(t, r), faults: f}
}

// wait lets everything done so far age past the window (on the Redis
// clock: registrytest.Registry.Age).
func (c *corruptRegistry) wait(t *testing.T) {
	t.Helper()
	c.Age(t, corruptWindow+150*time.Millisecond)
}

func (c *corruptRegistry) file(p string) string { return filepath.Join(c.Root, filepath.FromSlash(p)) }

// verify runs `linkdb verify` on the raw storage, through the same faults.
func (c *corruptRegistry) verify(t *testing.T) *linkdb.Report {
	t.Helper()
	rep, err := linkdb.Verify(t.Context(), c.faults.wrap(c.raw), linkdb.VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// scene is two repositories sharing layer "shared":
//
//	corrupt/a:v1  -> A2 (its own layer); A1 (shared + its own layer) is
//	                 untagged, so GC of corrupt/a deletes A1, unlinks shared
//	                 from corrupt/a, and must keep shared's blob for B
//	corrupt/b:v1  -> B (shared + its own layer)
type scene struct {
	shared, a1, a2, b digest.Digest
	// keep is every blob the tagged images A2 and B reference, their
	// manifests included: GC must never delete one.
	keep []digest.Digest
}

func buildScene(t *testing.T, c *corruptRegistry) *scene {
	t.Helper()
	shared := layer(t)
	a1 := registrytest.Image(t, shared, layer(t))
	a2 := registrytest.Image(t, layer(t))
	b := registrytest.Image(t, shared, layer(t))
	s := &scene{
		a1:     hashDigest(push(t, c.gcRegistry, "corrupt/a:v1", a1)),
		b:      hashDigest(push(t, c.gcRegistry, "corrupt/b:v1", b)),
		a2:     hashDigest(push(t, c.gcRegistry, "corrupt/a:v1", a2)),
		shared: hashDigest(digestOf(t, shared)),
	}
	s.keep = append(blobsOf(t, a2), blobsOf(t, b)...)
	c.wait(t)
	return s
}

func hashDigest(h ggcrv1.Hash) digest.Digest { return digest.Digest(h.String()) }

// blobsOf lists the manifest, config and layer digests of img.
func blobsOf(t *testing.T, img ggcrv1.Image) []digest.Digest {
	t.Helper()
	out := []digest.Digest{hashDigest(digestOf(t, img)), hashDigest(configDigest(t, img))}
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range ls {
		out = append(out, hashDigest(digestOf(t, l)))
	}
	return out
}

// gcOutcome is what one run answered: a report, or an abort reason.
type gcOutcome struct {
	abort string
	rep   *collector.Report
}

// collectBoth runs a dry run, then a real run of repo, and checks that they
// agree: the same deletions, or the same abort (and then nothing changed).
func (c *corruptRegistry) collectBoth(t *testing.T, repo string) gcOutcome {
	t.Helper()
	var out [2]gcOutcome
	before := c.tree(t)
	for i, dry := range []bool{true, false} {
		code, body := c.collectRaw(t, repo, dry)
		switch code {
		case http.StatusOK:
			out[i].rep = decodeReport(t, body)
		case http.StatusServiceUnavailable:
			errCode, reason := decodeErr(t, body)
			if errCode != "GC_ABORTED" {
				t.Fatalf("%s dry=%v: %s %s", repo, dry, errCode, body)
			}
			out[i].abort = reason
		default:
			t.Fatalf("%s dry=%v: status %d %s", repo, dry, code, body)
		}
		if dry {
			if after := c.tree(t); after != before {
				t.Fatalf("%s: the dry run changed storage:\n%s", repo, diffLines(before, after))
			}
		}
	}
	dry, real := out[0], out[1]
	if dry.abort != real.abort {
		t.Fatalf("%s: dry run abort %q, real run abort %q", repo, dry.abort, real.abort)
	}
	if real.abort != "" {
		if after := c.tree(t); after != before {
			t.Fatalf("%s: an aborted run changed storage:\n%s", repo, diffLines(before, after))
		}
		return real
	}
	for _, pair := range []struct {
		what      string
		dry, real []digest.Digest
	}{
		{"manifests", dry.rep.ManifestsDeleted, real.rep.ManifestsDeleted},
		{"layer links", dry.rep.LayersUnlinked, real.rep.LayersUnlinked},
		{"blobs", dry.rep.BlobsDeleted, real.rep.BlobsDeleted},
	} {
		if !sameSet(pair.dry, pair.real) {
			t.Fatalf("%s: the dry run announced %s %v, the real run deleted %v\nreal run kept: %+v",
				repo, pair.what, pair.dry, pair.real, real.rep.Kept)
		}
	}
	return real
}

// assertKept checks that the data of every blob the tagged images
// reference is still in storage (in whatever state the test left it).
func (c *corruptRegistry) assertKept(t *testing.T, s *scene) {
	t.Helper()
	for _, d := range s.keep {
		if _, err := os.Lstat(c.file(layout.BlobDataPath(d))); err != nil {
			t.Errorf("blob %s of a tagged image is gone: %v", d, err)
		}
	}
}

func blobReason(rep *collector.Report, d digest.Digest) (reclaim.Reason, string) {
	for _, k := range rep.Kept {
		if k.Kind == reclaim.KindBlob && k.Digest == d {
			return k.Reason, k.Detail
		}
	}
	return 0, ""
}

func makeDir(t *testing.T, full string) {
	t.Helper()
	if err := os.RemoveAll(full); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(full, 0o755); err != nil {
		t.Fatal(err)
	}
}

// Finding 5: a directory where B's reverse link to the shared layer should
// be. GC of corrupt/a listed the reverse links, skipped the directory, saw
// no other repository and deleted the blob: B's tag no longer pulled.
func TestE2EReverseLinkDirectoryKeepsSharedBlob(t *testing.T) {
	c := startCorrupt(t)
	s := buildScene(t, c)
	makeDir(t, c.file(layout.ReverseLinkPath(s.shared, "corrupt/b", reclaim.LinkLayer)))

	out := c.collectBoth(t, "corrupt/a")
	if out.abort != "" {
		t.Fatalf("aborted: %s", out.abort)
	}
	if contains(out.rep.BlobsDeleted, digestHash(t, s.shared)) {
		t.Fatalf("the shared blob B still uses was deleted: %v", out.rep.BlobsDeleted)
	}
	if !contains(out.rep.ManifestsDeleted, digestHash(t, s.a1)) {
		t.Errorf("the untagged manifest should go: %v", out.rep.ManifestsDeleted)
	}
	r, detail := blobReason(out.rep, s.shared)
	if r != reclaim.ReasonCheckFailed || !strings.Contains(detail, "corrupt/b") || !strings.Contains(detail, "directory") {
		t.Errorf("shared blob kept as %v %q, want check_failed naming corrupt/b's directory", r, detail)
	}
	c.assertKept(t, s)
	registrytest.AssertPullable(t, c.Registry, "corrupt/b:v1")
	if v := c.verify(t); v.Counts[linkdb.Corrupt] == 0 || v.ExitCode != linkdb.ExitDataLoss {
		t.Errorf("verify: exit %d, counts %v", v.ExitCode, v.Counts)
	}
}

// Finding 6: a directory where B's manifest revision link should be. The
// snapshot skipped it: B vanished from the report and its blobs were
// deleted although its tag still names it.
func TestE2ERevisionLinkDirectoryAborts(t *testing.T) {
	c := startCorrupt(t)
	s := buildScene(t, c)
	makeDir(t, c.file(layout.RevisionLinkPath("corrupt/b", s.b)))

	assertAbort(t, c.gcRegistry, "corrupt/b", string(reclaim.AbortStorageUnreadable))
	c.assertKept(t, s)
	if v := c.verify(t); v.Counts[linkdb.Corrupt] == 0 || v.ExitCode != linkdb.ExitDataLoss {
		t.Errorf("verify: exit %d, counts %v", v.ExitCode, v.Counts)
	}
}

// Finding 7: a directory where B's tag current link should be. The dry run
// took B for untagged and listed it for deletion; the real run re-read the
// tags, failed, and deleted nothing.
func TestE2ETagCurrentLinkDirectoryAborts(t *testing.T) {
	c := startCorrupt(t)
	s := buildScene(t, c)
	makeDir(t, c.file(layout.TagCurrentPath("corrupt/b", "v1")))

	assertAbort(t, c.gcRegistry, "corrupt/b", string(reclaim.AbortStorageUnreadable))
	c.assertKept(t, s)
	if v := c.verify(t); v.Counts[linkdb.Corrupt] == 0 || v.ExitCode != linkdb.ExitDataLoss {
		t.Errorf("verify: exit %d, counts %v", v.ExitCode, v.Counts)
	}
}

func digestHash(t *testing.T, d digest.Digest) ggcrv1.Hash {
	t.Helper()
	h, err := ggcrv1.NewHash(d.String())
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestE2ECorruptStorage puts each kind of wrong object at each link and
// manifest path of the tagged image B, then collects both repositories
// (dry run, then real run) and verifies the link database.
func TestE2ECorruptStorage(t *testing.T) {
	targets := []struct {
		name string
		path func(s *scene) string
	}{
		{"reverse link", func(s *scene) string { return layout.ReverseLinkPath(s.shared, "corrupt/b", reclaim.LinkLayer) }},
		{"layer link", func(s *scene) string { return layout.LayerLinkPath("corrupt/b", s.shared) }},
		{"revision link", func(s *scene) string { return layout.RevisionLinkPath("corrupt/b", s.b) }},
		{"tag current link", func(s *scene) string { return layout.TagCurrentPath("corrupt/b", "v1") }},
		{"tag index link", func(s *scene) string { return layout.TagIndexPath("corrupt/b", "v1", s.b) }},
		{"manifest data", func(s *scene) string { return layout.BlobDataPath(s.b) }},
	}
	kinds := []struct {
		name  string
		apply func(t *testing.T, c *corruptRegistry, p string)
	}{
		{"directory", func(t *testing.T, c *corruptRegistry, p string) { makeDir(t, c.file(p)) }},
		{"empty file", func(t *testing.T, c *corruptRegistry, p string) {
			if err := os.WriteFile(c.file(p), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{"garbage", func(t *testing.T, c *corruptRegistry, p string) {
			if err := os.WriteFile(c.file(p), []byte("\x00not a digest\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{"dangling symlink", func(t *testing.T, c *corruptRegistry, p string) {
			if err := os.Remove(c.file(p)); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(filepath.Join(c.Root, "nowhere", "link"), c.file(p)); err != nil {
				t.Fatal(err)
			}
		}},
		{"no read permission", func(t *testing.T, c *corruptRegistry, p string) { c.faults.add(p) }},
	}
	for _, tg := range targets {
		for _, k := range kinds {
			t.Run(tg.name+"/"+k.name, func(t *testing.T) {
				t.Parallel() // each case has its own registry and Redis prefix; mostly waiting
				c := startCorrupt(t)
				s := buildScene(t, c)
				p := tg.path(s)
				k.apply(t, c, p)

				a := c.collectBoth(t, "corrupt/a")
				b := c.collectBoth(t, "corrupt/b")
				t.Logf("corrupt/a: abort %q; corrupt/b: abort %q", a.abort, b.abort)

				c.assertKept(t, s)
				if _, err := os.Lstat(c.file(p)); err != nil {
					t.Errorf("GC removed the corrupt object at %s: %v", p, err)
				}
				registrytest.AssertPullable(t, c.Registry, "corrupt/a:v1")
				if tg.name == "reverse link" {
					// Distribution never reads reverse links: B must pull.
					registrytest.AssertPullable(t, c.Registry, "corrupt/b:v1")
				}
				if v := c.verify(t); v.ExitCode == linkdb.ExitClean {
					t.Errorf("linkdb verify says clean; counts %v", v.Counts)
				} else {
					t.Logf("verify: exit %d, counts %v", v.ExitCode, v.Counts)
				}
			})
		}
	}
}
