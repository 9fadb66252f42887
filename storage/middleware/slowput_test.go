package middleware

import (
	"context"
	"net/http"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

// A manifest PUT that stalls for longer than the window after its
// references were checked, right before it writes its revision link, while
// GC fences and deletes a layer link nothing referenced yet: the PUT must
// not answer 201 for an image whose layer is gone (docs/gc-protocol.md,
// case 11). Before the re-check (revisionrecheck.go) it did.
func TestSlowManifestPutMeetsCollectedLayer(t *testing.T) {
	storagetest.ForEachBackend(t, func(t *testing.T, b storagetest.Backend) {
		for _, cache := range []string{"", "inmemory"} {
			t.Run("cache="+cache, func(t *testing.T) {
				a := newWindowApp(t, b, cache)
				img, _ := random.Image(256, 1)
				m, blobs := imageDigests(t, img)
				layer := blobs[1]
				// the manifest's data is written after the verification
				// and before the revision link: pause there
				g := storagetest.NewGate("PutContent", "/"+m.Encoded()+"/data")
				err := paused(t, g, func() error { return a.push("r:v1", img, noRetry) }, func() {
					a.age(t) // the push stalls for longer than the window
					collectLayer(t, a, "r", layer)
				})
				if statusOf(err) != http.StatusServiceUnavailable {
					t.Fatalf("manifest PUT whose layer was collected before its revision link: %v, want 503", err)
				}
				if err := a.push("r:v1", img); err != nil {
					t.Fatalf("retry: %v", err)
				}
				a.pullAll("r:v1")
				requireReverseLinks(t, a)
			})
		}
	})
}

// collectLayer plays a collect of repo that found its link to layer
// unreferenced: fence, delete the link, then the blob, release.
func collectLayer(t *testing.T, a *testApp, repo string, layer digest.Digest) {
	t.Helper()
	f := a.fence(t, reclaim.Object{Blob: layer, Repo: repo, Kind: reclaim.LinkLayer})
	a.gcDelete(t, layout.LayerLinkDir(repo, layer))
	a.release(t, f)
	f = a.fence(t, reclaim.Object{Blob: layer})
	a.gcDelete(t, layout.BlobDir(layer))
	a.release(t, f)
}

// The same for an index whose child manifest (pushed by digest, untagged)
// is collected while the index PUT stalls before its revision link, for
// every index validation setting.
func TestSlowIndexPutMeetsCollectedChild(t *testing.T) {
	storagetest.ForEachBackend(t, func(t *testing.T, b storagetest.Backend) {
		for vi, val := range indexValidations {
			if b.Cluster && !storagetest.ClusterAll() && vi > 0 {
				continue
			}
			t.Run(val.name, func(t *testing.T) {
				a := newTestApp(t, appOptions{window: testWindow, redisAddr: b.Addr, prefix: b.Prefix, validation: &val.v})
				a.age(t)
				ti := pushIndexChildren(t, a, types.OCIImageIndex, 2)
				c := ti.children[0]
				g := storagetest.NewGate("PutContent", "/"+ti.digest.Encoded()+"/data")
				code := paused(t, g, func() int { code, _ := a.putIndex(t, ti); return code }, func() {
					a.age(t)
					f := a.fence(t, reclaim.Object{Blob: c, Repo: "r", Kind: reclaim.LinkManifest})
					a.gcDelete(t, layout.RevisionDir("r", c))
					a.release(t, f)
				})
				if code != http.StatusServiceUnavailable {
					t.Fatalf("index PUT whose child was collected before its revision link: %d, want 503", code)
				}
				if _, err := a.env.Raw.Stat(context.Background(), layout.RevisionLinkPath("r", ti.digest)); err == nil {
					t.Errorf("the refused index PUT wrote its revision link")
				}
				requireReverseLinks(t, a)
			})
		}
	})
}
