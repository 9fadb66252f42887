package linkdb

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// TestRebuildListingWalksSeeWhatWalkSaw: rebuild reads forward links
// straight from the listing of their set and, on the filesystem driver,
// walks the blob store by listing _repositories. What the driver's Walk
// used to show it must still see: a directory and a dangling symlink at a
// forward link path are damage; a file where a link directory (or a
// kind's directory of reverse links) should be and a write's temporary file
// are nothing; a stale reverse link of a nested
// repository, and a directory at a reverse link path, are seen.
func TestRebuildListingWalksSeeWhatWalkSaw(t *testing.T) {
	ctx := context.Background()
	d, root := fsDriver(t)
	file := func(p string) string { return filepath.Join(root, filepath.FromSlash(p)) }
	put := func(p, content string) {
		t.Helper()
		if err := d.PutContent(ctx, p, []byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	blob := func(s string) digest.Digest {
		b := digest.FromString(s)
		put(layout.BlobDataPath(b), s)
		return b
	}
	good, dir, dangling, stale := blob("good"), blob("dir"), blob("dangling"), blob("stale")
	put(layout.LayerLinkPath("app", good), good.String())
	if err := os.MkdirAll(file(layout.LayerLinkPath("app", dir)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(file(layout.LayerLinkDir("app", dangling)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(file("/nowhere"), file(layout.LayerLinkPath("app", dangling))); err != nil {
		t.Fatal(err)
	}
	// Litter that holds no link path.
	put(layout.LayersDir("app")+"/sha256/"+digest.FromString("file").Encoded(), "a file, not a link directory")
	put(layout.ReverseLinkPath(good, "app", reclaim.LinkLayer)+".0f.tmp", "a write in flight")
	put(layout.ReverseLinksDir(good)+"/other/"+string(reclaim.LinkLayer), "a file, not a kind's directory")
	// Stale: no forward links.
	put(layout.ReverseLinkPath(stale, "gone/deep/er", reclaim.LinkManifest), stale.String())
	if err := os.MkdirAll(file(layout.ReverseLinkPath(stale, "gone/dir", reclaim.LinkLayer)), 0o755); err != nil {
		t.Fatal(err)
	}

	res, err := Rebuild(ctx, d, RebuildOptions{})
	if !errors.Is(err, ErrDamaged) || errors.Is(err, ErrIncomplete) || res.Complete {
		t.Fatalf("rebuild: %v, complete %v; want damage, nothing unreadable", err, res.Complete)
	}
	if res.Counts[Corrupt] != 2 || res.Counts[Unreadable] != 0 || res.Counts[StaleReverse] != 2 {
		t.Errorf("counts %+v, want 2 corrupt (directory, dangling), 2 stale, nothing unreadable", res.Counts)
	}
	// The good link's reverse link is written; the stale ones stay (no
	// fence) and are seen in the blob phase with it.
	if res.ForwardLinks != 3 || res.ReverseAdded != 1 || res.ReverseLinks != 3 {
		t.Errorf("forward %d, added %d, reverse seen %d; want 3, 1, 3", res.ForwardLinks, res.ReverseAdded, res.ReverseLinks)
	}
	if ok, err := NewReverseLinks(d).Has(ctx, good, reclaim.RepoLink{Repo: "app", Kind: reclaim.LinkLayer}); !ok || err != nil {
		t.Errorf("reverse link of the good link: %v %v", ok, err)
	}
}
