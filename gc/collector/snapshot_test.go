package collector

import (
	"context"
	"sync"
	"testing"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// listHook runs before every List, also the ones of its own Walk (the
// fallback walk lists one directory at a time, like the filesystem driver).
type listHook struct {
	storagedriver.StorageDriver
	before func(p string)
}

func (h listHook) List(ctx context.Context, p string) ([]string, error) {
	h.before(p)
	return h.StorageDriver.List(ctx, p)
}

func (h listHook) Walk(ctx context.Context, p string, f storagedriver.WalkFn, opts ...func(*storagedriver.WalkOptions)) error {
	return storagedriver.WalkFallback(ctx, h, p, f, opts...)
}

// A client deletes an untagged manifest while the snapshot walks the
// revisions: listed, then gone when the walk enters it. The walk ends with
// "not found", which must not read as "no more revisions and no tags": the
// tagged manifest after it, and its layers, would look unreferenced.
func TestSnapshotWalkCutByConcurrentDeleteIsReadAgain(t *testing.T) {
	f := newFixture(t)
	const repo = "team/app"
	a := f.Image(repo, nil, "a-layer")
	b := f.Image(repo, nil, "b-layer")
	// The one the walk meets first is deleted under it; the other is tagged.
	gone, tagged, taggedLayer := a, b, "b-layer"
	if b.Digest < a.Digest {
		gone, tagged, taggedLayer = b, a, "a-layer"
	}
	f.Tag(repo, "v1", tagged.Digest)

	var once sync.Once
	goneDir := layout.RevisionDir(repo, gone.Digest)
	f.c.driver = listHook{StorageDriver: f.D, before: func(p string) {
		if p == goneDir {
			once.Do(func() {
				if err := f.D.Delete(context.Background(), goneDir); err != nil {
					t.Error(err)
				}
			})
		}
	}}

	rep, err := f.c.Collect(context.Background(), repo, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r := reasonOf(rep, reclaim.KindManifest, tagged.Digest); r != reclaim.ReasonTagged {
		t.Fatalf("tagged manifest: %s; deleted %s", r, summary(rep))
	}
	for _, l := range []string{taggedLayer, "config of " + taggedLayer} {
		d := digest.FromString(l)
		if has(rep.LayersUnlinked, d) || has(rep.BlobsDeleted, d) || !f.Exists(layout.BlobDataPath(d)) {
			t.Errorf("layer %q of the tagged manifest lost: %s", l, summary(rep))
		}
	}
}
