package registry_test

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	ggcrv1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// A manifest DELETE by digest removes the tags that name the manifest:
// Distribution looks the tags up, then deletes each tag's directory. A push
// that moves such a tag to another manifest in between must not lose its
// tag after a 201: the tag delete is a compare-and-delete under the tag's
// fence, as retention's is (docs/gc-protocol.md, case 13 and "Every check,
// what acts on it"). Forced with storage hooks through HTTP on both
// descriptor caches.

// tagMoveFixture pushes image A to r:v1 and image B to r by digest, and
// returns them with B's manifest bytes.
func tagMoveFixture(t *testing.T, g *gcRegistry) (a, b ggcrv1.Hash, bRaw []byte, bType string) {
	t.Helper()
	imgA, imgB := registrytest.Image(t, layer(t)), registrytest.Image(t, layer(t))
	a = push(t, g, "r:v1", imgA)
	b = push(t, g, "r@"+digestOf(t, imgB).String(), imgB)
	raw, err := imgB.RawManifest()
	if err != nil {
		t.Fatal(err)
	}
	mt, err := imgB.MediaType()
	if err != nil {
		t.Fatal(err)
	}
	return a, b, raw, string(mt)
}

// deleteManifestAsync DELETEs r@d in the background; the channel gets the
// status (0: the request failed).
func deleteManifestAsync(t *testing.T, g *gcRegistry, d ggcrv1.Hash) <-chan int {
	done := make(chan int, 1)
	go func() {
		code, _ := manifestRequest(context.Background(), t, g, http.MethodDelete, d.String(), "", nil)
		done <- code
	}()
	return done
}

// wantTag checks that r:tag resolves to want and pulls.
func wantTag(t *testing.T, g *gcRegistry, tag string, want ggcrv1.Hash) {
	t.Helper()
	got := registrytest.AssertPullable(t, g.Registry, "r:"+tag)
	if got.Digest != want {
		t.Errorf("r:%s names %s, want %s", tag, got.Digest, want)
	}
}

// The push moves the tag after the DELETE looked the tags up and before it
// deletes them. Before the compare-and-delete the push got 201 and the tag
// was gone.
func TestE2EManifestDeleteKeepsAMovedTag(t *testing.T) {
	onEachCacheGC(t, func(t *testing.T, g *gcRegistry) {
		a, b, bRaw, bType := tagMoveFixture(t, g)
		current := layout.TagCurrentPath("r", "v1")
		var once sync.Once
		looked, release := make(chan struct{}), make(chan struct{})
		gcHook.SetAfter(t, func(ctx context.Context, m, p string, err error) {
			if m == "GetContent" && p == current && err == nil && inManifestDelete(ctx) {
				// Distribution's lookup of the tags naming A
				once.Do(func() { close(looked); <-release })
			}
		})
		done := deleteManifestAsync(t, g, a)
		<-looked
		if code, err := manifestRequest(t.Context(), t, g, http.MethodPut, "v1", bType, bRaw); err != nil || code != http.StatusCreated {
			t.Fatalf("push moving the tag: %d %v", code, err)
		}
		close(release)
		if code := <-done; code != http.StatusAccepted {
			t.Fatalf("DELETE of A: %d", code)
		}
		wantTag(t, g, "v1", b)
		if s := registrytest.ManifestStatus(t, g.Registry, "r@"+a.String()); s != http.StatusNotFound {
			t.Errorf("A answers %d after its DELETE", s)
		}
	})
}

// The push moves the tag after the DELETE read it again under the tag's
// fence (still A) and before it deletes the directory: the push finds the
// fence, waits for the release, finds its write gone, and answers 503; its
// retry tags B. Never a 201 for a tag that is gone.
func TestE2EManifestDeleteFencesTheTagItDeletes(t *testing.T) {
	onEachCacheGC(t, func(t *testing.T, g *gcRegistry) {
		a, b, bRaw, bType := tagMoveFixture(t, g)
		current := layout.TagCurrentPath("r", "v1")
		var reads atomic.Int32
		var onceRead, onceWrite sync.Once
		reread, releaseDelete := make(chan struct{}), make(chan struct{})
		written := make(chan struct{})
		gcHook.SetAfter(t, func(ctx context.Context, m, p string, err error) {
			switch {
			case m == "GetContent" && p == current && err == nil && inManifestDelete(ctx):
				if reads.Add(1) == 2 { // the re-read under the fence
					onceRead.Do(func() { close(reread); <-releaseDelete })
				}
			case m == "PutContent" && p == current && !inManifestDelete(ctx):
				onceWrite.Do(func() { close(written) })
			}
		})
		done := deleteManifestAsync(t, g, a)
		select {
		case <-reread:
		case code := <-done:
			t.Fatalf("the DELETE answered %d without reading the tag again under its fence", code)
		}
		pushed := make(chan int, 1)
		go func() {
			code, _ := manifestRequest(context.Background(), t, g, http.MethodPut, "v1", bType, bRaw)
			pushed <- code
		}()
		<-written // the push wrote the tag and now asks for its fence
		close(releaseDelete)
		if code := <-done; code != http.StatusAccepted {
			t.Fatalf("DELETE of A: %d", code)
		}
		if code := <-pushed; code != http.StatusServiceUnavailable {
			t.Fatalf("push whose tag write the DELETE removed: %d, want 503", code)
		}
		if code, err := manifestRequest(t.Context(), t, g, http.MethodPut, "v1", bType, bRaw); err != nil || code != http.StatusCreated {
			t.Fatalf("retry of the push: %d %v", code, err)
		}
		wantTag(t, g, "v1", b)
	})
}

// inManifestDelete reports a driver call of a manifest DELETE request.
func inManifestDelete(ctx context.Context) bool {
	r, _ := ctx.Value("http.request").(*http.Request)
	return r != nil && r.Method == http.MethodDelete
}
