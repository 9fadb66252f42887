package registry_test

import (
	"context"
	"net/http"
	"sync"
	"testing"

	ggcrv1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/gc"
	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// TestE2ERaceCollectVsRepushOfCollectedManifest (found by TestSoakS3): a
// collect deletes an untagged manifest A, and before it reaches A's layer
// links a client pushes A again with a tag (201). The push touched A's
// layer links, but only the window protects them; a sweep that reaches them
// more than a window later must still see that a manifest references them
// (its plan does not: it deleted A). Before the fix the collect unlinked
// A's config and layer and deleted their blobs: the tag pointed at an image
// that no longer pulled.
//
// The collect is held right before it deletes a second untagged manifest B
// (A's fence is given back by then), A is pushed, the window passes, and
// the collect goes on.
func TestE2ERaceCollectVsRepushOfCollectedManifest(t *testing.T) {
	g := startGC(t)
	imgA, imgB := registrytest.Image(t, layer(t)), registrytest.Image(t, layer(t))
	a, b := digestOf(t, imgA), digestOf(t, imgB)
	if b.String() < a.String() { // the sweep deletes A first (digest order)
		imgA, imgB, a, b = imgB, imgA, b, a
	}
	push(t, g, "r@"+a.String(), imgA)
	push(t, g, "r@"+b.String(), imgB)
	g.settle() // both untagged, and older than the window

	reached, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	bLink := layout.RevisionLinkPath("r", digest.Digest(b.String()))
	setHook(t, func(_ context.Context, method, path string) error {
		if method == "Stat" && path == bLink {
			// the collect's re-check of B, under B's fence, after A's delete
			once.Do(func() { close(reached); <-release })
		}
		return nil
	})
	type result struct {
		code int
		body []byte
	}
	done := make(chan result, 1)
	go func() {
		code, _, body := g.send(t, http.MethodPost, "/gc/v1/repositories/r/collect?dry_run=false", "")
		done <- result{code, body}
	}()
	<-reached
	push(t, g, "r:v1", imgA) // A again, tagged: 201 (A's fence is gone)
	g.settle()               // what the push touched leaves the window
	close(release)
	res := <-done
	if res.code != http.StatusOK {
		t.Fatalf("collect: %d %s", res.code, res.body)
	}
	rep := decodeReport(t, res.body)
	if !contains(rep.ManifestsDeleted, a) || !contains(rep.ManifestsDeleted, b) {
		t.Fatalf("the collect should have deleted A and B (the interleaving did not happen): %+v", rep.ManifestsDeleted)
	}
	for _, d := range []ggcrv1.Hash{configDigest(t, imgA), layerHash(t, imgA)} {
		if contains(rep.LayersUnlinked, d) || contains(rep.BlobsDeleted, d) {
			t.Errorf("%s, referenced by r:v1 pushed during the sweep, was unlinked or deleted: layers %v blobs %v", d, rep.LayersUnlinked, rep.BlobsDeleted)
		}
		if r := reasonOf(rep, gc.KindLayerLink, d); r != "referenced" {
			t.Errorf("layer link %s kept as %q, want referenced", d, r)
		}
	}
	registrytest.AssertPullable(t, g.Registry, "r:v1")
	g.checkLinks(t)
	// B's layer did go: the re-read keeps only what is referenced
	if !contains(rep.LayersUnlinked, layerHash(t, imgB)) {
		t.Errorf("B's layer should have been unlinked: %v", rep.LayersUnlinked)
	}
}

func layerHash(t *testing.T, img ggcrv1.Image) ggcrv1.Hash {
	t.Helper()
	ls, err := img.Layers()
	if err != nil || len(ls) == 0 {
		t.Fatalf("layers: %v", err)
	}
	return digestOf(t, ls[0])
}
