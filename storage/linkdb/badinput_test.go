package linkdb

import (
	"context"
	"errors"
	"strings"
	"testing"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/linkdb/internal/gen"
)

// faulty fails List, Stat and GetContent for chosen paths, like a directory
// with the wrong permissions or an object store that throttles one prefix.
type faulty struct {
	storagedriver.StorageDriver
	fail func(op, path string) bool
}

var errDenied = errors.New("permission denied")

func (f *faulty) check(op, p string) error {
	if f.fail(op, p) {
		return errDenied
	}
	return nil
}

func (f *faulty) List(ctx context.Context, p string) ([]string, error) {
	if err := f.check("list", p); err != nil {
		return nil, err
	}
	return f.StorageDriver.List(ctx, p)
}

func (f *faulty) Stat(ctx context.Context, p string) (storagedriver.FileInfo, error) {
	if err := f.check("stat", p); err != nil {
		return nil, err
	}
	return f.StorageDriver.Stat(ctx, p)
}

func (f *faulty) GetContent(ctx context.Context, p string) ([]byte, error) {
	if err := f.check("get", p); err != nil {
		return nil, err
	}
	return f.StorageDriver.GetContent(ctx, p)
}

// Walk must go through the faults too.
func (f *faulty) Walk(ctx context.Context, p string, fn storagedriver.WalkFn, opts ...func(*storagedriver.WalkOptions)) error {
	return storagedriver.WalkFallback(ctx, f, p, fn, opts...)
}

func TestUnreadableReverseLinksNeverLookUnreferenced(t *testing.T) {
	ctx := context.Background()
	mem := inmemory.New()
	generate(t, mem, gen.Spec{Repos: 3, Images: 2, LayersPerImage: 2, Reverse: true})
	// An orphan blob whose only reverse link is stale, and a second orphan
	// in the same shard with no reverse links at all.
	orphan := digest.FromString("orphan with a stale reverse link")
	plain := digest.NewDigestFromEncoded(digest.SHA256, orphan.Encoded()[:2]+strings.Repeat("0", 62))
	for _, b := range []digest.Digest{orphan, plain} {
		if err := mem.PutContent(ctx, layout.BlobDataPath(b), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if err := mem.PutContent(ctx, layout.ReverseLinkPath(orphan, "gone", reclaim.LinkLayer), []byte(orphan)); err != nil {
		t.Fatal(err)
	}
	unreadable := layout.ReverseLinksDir(orphan)
	d := &faulty{StorageDriver: mem, fail: func(op, p string) bool { return op == "list" && p == unreadable }}

	rep := verify(t, d)
	if rep.ExitCode != ExitIncomplete {
		t.Errorf("exit %d, want %d (%+v)", rep.ExitCode, ExitIncomplete, rep.Counts)
	}
	var sawUnreadable, sawPlain bool
	for _, p := range rep.Findings {
		if p.Digest == orphan && p.Kind == Reclaimable {
			t.Errorf("a blob whose reverse links could not be read is called reclaimable")
		}
		if p.Digest == orphan && p.Kind == Unreadable {
			sawUnreadable = true
		}
		if p.Digest == plain && p.Kind == Reclaimable {
			sawPlain = true
		}
	}
	if !sawUnreadable {
		t.Errorf("unreadable reverse links of %s not reported: %+v", orphan, rep.Findings)
	}
	if !sawPlain {
		t.Errorf("the rest of the shard was not walked: %s not reported reclaimable: %+v", plain, rep.Findings)
	}

	// Rebuild reports it too, and still finishes (the blob phase does not
	// decide completeness).
	res, err := Rebuild(ctx, d, RebuildOptions{Offline: true, MinAge: -1})
	if err != nil {
		t.Fatalf("rebuild: %v", err)
	}
	if res.Counts[Unreadable] == 0 || !res.Complete {
		t.Errorf("rebuild: %+v", res)
	}
	if _, err := mem.Stat(ctx, layout.ReverseLinkPath(orphan, "gone", reclaim.LinkLayer)); err != nil {
		t.Errorf("rebuild removed a reverse link it could not list properly: %v", err)
	}
}

func TestUnreadableRepositoryMakesRebuildIncomplete(t *testing.T) {
	ctx := context.Background()
	mem := inmemory.New()
	generate(t, mem, gen.Spec{Repos: 4, Images: 2, LayersPerImage: 2, SharedLayers: 1})
	bad := gen.RepoName(1)
	corrupt := ""
	d := &faulty{StorageDriver: mem, fail: func(op, p string) bool {
		return op == "list" && p == layout.LayersDir(bad)+"/sha256"
	}}
	// and a corrupt link in another repository: reported, and damage.
	err := mem.Walk(ctx, layout.LayersDir(gen.RepoName(2)), func(fi storagedriver.FileInfo) error {
		if !fi.IsDir() && corrupt == "" {
			corrupt = fi.Path()
		}
		return nil
	})
	if err != nil || corrupt == "" {
		t.Fatal(err)
	}
	if err := mem.PutContent(ctx, corrupt, []byte("not a digest")); err != nil {
		t.Fatal(err)
	}

	res, err := Rebuild(ctx, d, RebuildOptions{Checkpoint: StorageCheckpoint(mem)})
	if !errors.Is(err, ErrIncomplete) || !errors.Is(err, ErrDamaged) {
		t.Fatalf("err %v, want ErrDamaged and ErrIncomplete", err)
	}
	if res.Complete {
		t.Error("marker written although a repository could not be read")
	}
	if _, ok, _ := LinkDBComplete(ctx, mem); ok {
		t.Error("marker in storage")
	}
	if res.Counts[Corrupt] != 1 || res.Counts[Unreadable] == 0 {
		t.Errorf("counts %+v", res.Counts)
	}
	// the corrupt link's path still names its blob: it got its reverse link.
	c := layout.Classify(corrupt)
	if ok, err := NewReverseLinks(mem).Has(ctx, c.Digest, reclaim.RepoLink{Repo: c.Repo, Kind: reclaim.LinkLayer}); !ok || err != nil {
		t.Errorf("corrupt link %s got no reverse link: %v %v", corrupt, ok, err)
	}

	rep := verify(t, d)
	if rep.ReclaimableComputed || rep.Counts[Reclaimable] != 0 {
		t.Errorf("reclaimable computed with a repository unreadable: %+v", rep)
	}
	if rep.ExitCode != ExitDataLoss { // the corrupt link
		t.Errorf("exit %d", rep.ExitCode)
	}

	// Readable again: the rerun walks the failed and the damaged
	// repository (neither was checkpointed), and the damage still holds the
	// marker back.
	d.fail = func(string, string) bool { return false }
	res, err = Rebuild(ctx, d, RebuildOptions{Checkpoint: StorageCheckpoint(mem)})
	if !errors.Is(err, ErrDamaged) || errors.Is(err, ErrIncomplete) || res.Complete || res.Repositories-res.RepositoriesSkipped != 2 {
		t.Fatalf("rerun: %+v %v", res, err)
	}
	// Repaired: the last rerun walks only the damaged repository and completes.
	if err := mem.PutContent(ctx, corrupt, []byte(c.Digest)); err != nil {
		t.Fatal(err)
	}
	res, err = Rebuild(ctx, d, RebuildOptions{Checkpoint: StorageCheckpoint(mem)})
	if err != nil || !res.Complete || res.Repositories-res.RepositoriesSkipped != 1 {
		t.Fatalf("rerun after repair: %+v %v", res, err)
	}
}

func TestWalkFailureInsideABlobDeliversEachReverseLinkOnce(t *testing.T) {
	ctx := context.Background()
	mem := inmemory.New()
	b := digest.FromString("two repositories, one unreadable")
	if err := mem.PutContent(ctx, layout.BlobDataPath(b), []byte("x")); err != nil {
		t.Fatal(err)
	}
	for _, repo := range []string{"a", "b"} { // both stale: no forward links
		if err := mem.PutContent(ctx, layout.ReverseLinkPath(b, repo, reclaim.LinkLayer), []byte(b)); err != nil {
			t.Fatal(err)
		}
	}
	bad := layout.ReverseLinksDir(b) + "/b"
	d := &faulty{StorageDriver: mem, fail: func(op, p string) bool { return op == "list" && p == bad }}
	rep := verify(t, d)
	if rep.Counts[StaleReverse] != 1 || rep.Counts[Unreadable] != 1 || rep.Counts[Reclaimable] != 0 {
		t.Fatalf("counts %+v, want one stale (a), one unreadable (b), nothing reclaimable", rep.Counts)
	}
}
