package linkdb

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// A layer link deleted while the rebuild walks the repository (listed,
// then gone when the walk enters its directory) ends the walk with "not
// found". That is not the end of _layers: every later link must still get
// its reverse link before the rebuild writes the marker.
func TestRebuildWalkCutByConcurrentDeleteResumes(t *testing.T) {
	ctx := context.Background()
	mem := inmemory.New()
	const repo = "team/app"
	var blobs []digest.Digest
	for i := range 6 {
		b := digest.FromString(fmt.Sprintf("layer %d", i))
		for p, c := range map[string]string{layout.BlobDataPath(b): "x", layout.LayerLinkPath(repo, b): b.String()} {
			if err := mem.PutContent(ctx, p, []byte(c)); err != nil {
				t.Fatal(err)
			}
		}
		blobs = append(blobs, b)
	}
	// The first link dir in walk order is deleted as the walk enters it.
	first := blobs[0]
	for _, b := range blobs {
		if b < first {
			first = b
		}
	}
	dir := layout.LayersDir(repo) + "/sha256/" + first.Encoded()
	var once sync.Once
	d := &faulty{StorageDriver: mem, fail: func(op, p string) bool {
		if op == "list" && p == dir {
			once.Do(func() {
				if err := mem.Delete(ctx, dir); err != nil {
					t.Error(err)
				}
			})
		}
		return false
	}}

	res, err := Rebuild(ctx, d, RebuildOptions{Workers: 1})
	if err != nil || !res.Complete {
		t.Fatalf("rebuild: %+v %v", res, err)
	}
	links := NewReverseLinks(mem)
	for _, b := range blobs {
		if b == first {
			continue
		}
		if ok, err := links.Has(ctx, b, reclaim.RepoLink{Repo: repo, Kind: reclaim.LinkLayer}); !ok || err != nil {
			t.Errorf("layer link to %s has no reverse link after the rebuild: %v", b, err)
		}
	}
	if rep := verify(t, mem); rep.ExitCode != ExitClean {
		t.Errorf("verify: exit %d, %+v", rep.ExitCode, rep.Findings)
	}
}

func TestWalksAfter(t *testing.T) {
	for _, c := range []struct {
		p, q string
		want bool
	}{
		{"/t/v1-rc", "/t/v1/current/link", true}, // '-' sorts before '/', but v1's subtree comes first
		{"/t/v1/current/link", "/t/v1", true},
		{"/t/v1", "/t/v1/current/link", false},
		{"/t/a", "/t/b", false},
		{"/t/b", "/t/a/x", true},
		{"/t/a", "/t/a", false},
	} {
		if got := walksAfter(c.p, c.q); got != c.want {
			t.Errorf("walksAfter(%q, %q) = %v, want %v", c.p, c.q, got, c.want)
		}
	}
}
