package registry_test

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ggcrv1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/gc/collector"
	"github.com/reclaim-registry/reclaim/reclaim"
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
	g.settle(t) // both untagged, and older than the window

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
	g.settle(t)              // what the push touched leaves the window
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
		if r := reasonOf(rep, reclaim.KindLayerLink, d); r != "referenced" {
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

// A manifest PUT checks what its manifest references at its first storage
// call and writes the revision link that makes them referenced later,
// after the manifest's own data. Found by TestSoakS3 ("an index child whose
// revision link is gone while its tagged index references it"): a PUT that
// stalls in between for longer than the window (it waited out a fence on
// its own manifest, or S3 was slow) while a collect of the repository,
// which cannot see the new manifest yet, finds its references untouched for
// a window and deletes them. The PUT must then not answer 201; before the
// re-check at the revision link write
// (storage/middleware/revisionrecheck.go) it did, and the tag pointed at an
// image that no longer pulled.
//
// Each test holds the PUT with a storage hook at the write of the
// manifest's data, lets the window pass, runs a real collect, then lets
// the PUT go on.

func TestE2ERaceSlowIndexPutVsCollectOfItsChild(t *testing.T) {
	g := startGC(t)
	child := registrytest.Image(t, layer(t))
	c := push(t, g, "r@"+digestOf(t, child).String(), child)
	idx := mutate.AppendManifests(empty.Index, mutate.IndexAddendum{Add: child,
		Descriptor: ggcrv1.Descriptor{Platform: &ggcrv1.Platform{OS: "linux", Architecture: "amd64"}}})
	g.settle(t) // the child is untagged and older than the window
	err := slowPut(t, g, digestOf(t, idx), func(opts ...remote.Option) error {
		return remote.WriteIndex(g.Ref(t, "r:v1"), idx, opts...)
	}, func(rep *collector.Report) {
		if !contains(rep.ManifestsDeleted, c) {
			t.Fatalf("the collect should have deleted the untagged child (the interleaving did not happen): %+v", rep.ManifestsDeleted)
		}
	})
	if err == nil {
		registrytest.AssertPullable(t, g.Registry, "r:v1")
		t.Fatal("the index PUT was acknowledged although its child was collected before its revision link")
	}
	if err := remote.WriteIndex(g.Ref(t, "r:v1"), idx, g.Remote(t)...); err != nil {
		t.Fatalf("push again: %v", err)
	}
	registrytest.AssertPullable(t, g.Registry, "r:v1")
	g.checkLinks(t)
}

func TestE2ERaceSlowManifestPutVsCollectOfItsLayers(t *testing.T) {
	g := startGC(t)
	img := registrytest.Image(t, layer(t))
	err := slowPut(t, g, digestOf(t, img), func(opts ...remote.Option) error {
		return remote.Write(g.Ref(t, "r:v1"), img, opts...)
	}, func(rep *collector.Report) {
		if !contains(rep.LayersUnlinked, layerHash(t, img)) {
			t.Fatalf("the collect should have unlinked the layer nothing referenced yet (the interleaving did not happen): %+v", rep.LayersUnlinked)
		}
	})
	if err == nil {
		registrytest.AssertPullable(t, g.Registry, "r:v1")
		t.Fatal("the manifest PUT was acknowledged although its layer was collected before its revision link")
	}
	push(t, g, "r:v1", img)
	registrytest.AssertPullable(t, g.Registry, "r:v1")
	g.checkLinks(t)
}

// slowPut runs put (one attempt, no retries) and holds it at the write of
// manifest m's data; meanwhile the window passes and a real collect of r
// runs, whose report check looks at. It returns put's result.
func slowPut(t *testing.T, g *gcRegistry, m ggcrv1.Hash, put func(...remote.Option) error, check func(*collector.Report)) error {
	t.Helper()
	data := layout.BlobDataPath(digest.Digest(m.String()))
	reached, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	setHook(t, func(_ context.Context, method, path string) error {
		if method == "PutContent" && path == data {
			once.Do(func() { close(reached); <-release })
		}
		return nil
	})
	done := make(chan error, 1)
	go func() {
		done <- put(append(g.Remote(t), remote.WithRetryBackoff(remote.Backoff{Duration: time.Millisecond, Steps: 1}))...)
	}()
	select {
	case <-reached:
	case err := <-done:
		t.Fatalf("the PUT ended before the write of its manifest's data: %v", err)
	}
	g.settle(t) // the PUT stalls for longer than the window
	code, body := g.collectRaw(t, "r", false)
	if code != http.StatusOK {
		close(release)
		t.Fatalf("collect: %d %s", code, body)
	}
	check(decodeReport(t, body))
	close(release)
	return <-done
}

// TestE2ECollectDoesNotFenceWhatItsPlanMissed: a collect plans A's layer
// link L for unlinking (A is untagged), and then, while it deletes A, a
// client pushes C, which needs L, to r:v2. The delete phase runs longer
// than the window (a slow store: here, held by a hook while the window
// passes in real time). The layer's fence must be refused, since L was
// accessed after the plan: before, the fence was granted (the access was
// older than the window), the re-read under the fence kept L, but a pull
// of r:v2 met the fence meanwhile and answered 404 (found by TestSoakS3:
// an audit pull of a tagged image failed with BLOB_UNKNOWN while its
// layer link, data and reverse link were all there).
func TestE2ECollectDoesNotFenceWhatItsPlanMissed(t *testing.T) {
	const w = 300 * time.Millisecond
	for cache, opt := range descriptorCaches(t) {
		t.Run(cache, func(t *testing.T) {
			g := completeGC(t, registrytest.Start(t, opt,
				registrytest.WithStorageMiddleware("gchook", nil),
				registrytest.WithStorageMiddleware("reclaim", reclaimOptions(t, w, ""))))
			g.Age(t, w+200*time.Millisecond) // GC trusts a tracker that recorded for a window
			shared := layer(t)
			imgA := registrytest.Image(t, shared)
			a := push(t, g, "r:v1", imgA)
			push(t, g, "r:v1", registrytest.Image(t, layer(t))) // A untagged
			g.Age(t, w+200*time.Millisecond)

			aLink := layout.RevisionLinkPath("r", digest.Digest(a.String()))
			revisions := layout.RevisionsDir("r") + "/sha256"
			var onceA, onceList sync.Once
			var afterA atomic.Bool
			reachedA, releaseA := make(chan struct{}), make(chan struct{})
			reachedList, releaseList := make(chan struct{}), make(chan struct{})
			setHook(t, func(_ context.Context, method, path string) error {
				switch {
				case method == "Stat" && path == aLink:
					// the collect's re-check of A, under A's fence: its plan is made
					onceA.Do(func() { close(reachedA); <-releaseA; afterA.Store(true) })
				case method == "List" && path == revisions && afterA.Load():
					// the re-read of the revisions, after the layer batch's fences
					onceList.Do(func() { close(reachedList); <-releaseList })
				}
				return nil
			})
			done := make(chan *collector.Report, 1)
			go func() {
				code, body := g.collectRaw(t, "r", false)
				if code != http.StatusOK {
					t.Errorf("collect: %d %s", code, body)
					done <- nil
					return
				}
				done <- decodeReport(t, body)
			}()
			<-reachedA
			imgC := registrytest.Image(t, shared, layer(t))
			push(t, g, "r:v2", imgC) // touches L, after the plan
			// Real time, not Age: the plan's start must age with the push.
			time.Sleep(w + 100*time.Millisecond)
			close(releaseA)
			<-reachedList
			l := layerHash(t, imgA)
			status := registrytest.BlobStatus(t, g.Registry, "r", l)
			close(releaseList)
			rep := <-done
			if status != http.StatusOK {
				t.Errorf("a pull of r:v2's layer during the collect's layer batch answered %d, want 200 (the collect fenced a link its plan missed)", status)
			}
			if rep == nil {
				return
			}
			if contains(rep.LayersUnlinked, l) {
				t.Fatalf("the layer r:v2 needs was unlinked: %v", rep.LayersUnlinked)
			}
			if r := reasonOf(rep, reclaim.KindLayerLink, l); r != "recently_accessed" {
				t.Errorf("layer link kept as %q, want recently_accessed (its fence refused)", r)
			}
			if !contains(rep.ManifestsDeleted, a) {
				t.Errorf("A was not deleted: %v", rep.ManifestsDeleted)
			}
			registrytest.AssertPullable(t, g.Registry, "r:v2")
		})
	}
}
