package middleware

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

// These tests force each interleaving of docs/gc-protocol.md: the GC side
// is played step by step (fence, re-check, delete, release) against a real
// client pushing and pulling through the real app.

// testWindow is long enough that nothing a test touched leaves it by
// itself on a loaded machine: tests move time on with age, not sleeps.
const testWindow = time.Minute

func newWindowApp(t *testing.T, b storagetest.Backend, cache string) *testApp {
	a := newTestApp(t, appOptions{window: testWindow, redisAddr: b.Addr, prefix: b.Prefix, cache: cache})
	a.age(t) // the epoch must be a window old
	return a
}

// age moves every access record and the recording epoch of the app's key
// prefix one window (and a millisecond) into the past, and empties the
// process's read dedup, as if the window had passed with no access: the test
// clock for both miniredis and a real Redis, whose scripts read their own
// TIME.
func (a *testApp) age(t *testing.T) {
	t.Helper()
	prefix := a.opts.prefix
	if prefix == "" {
		prefix = "reclaim:"
	}
	storagetest.Age(t, a.env.Tracker.Client(), prefix, testWindow+time.Millisecond)
	a.forgetDedup() // the window has passed for this process's read dedup too
	// and for the checks of requests in flight (scope.covered)
	a.env.Age(testWindow + time.Millisecond)
}

// watchFenced signals the first touch a fence refuses.
func watchFenced(a *testApp) *storagetest.Fenced {
	return storagetest.WatchFenced(a.env.Tracker.Client())
}

func (a *testApp) fence(t *testing.T, o reclaim.Object) reclaim.Hold {
	t.Helper()
	f, err := a.env.Tracker.Fence(context.Background(), o, testWindow, time.Minute)
	if err != nil {
		t.Fatalf("GC fence %v: %v", o, err)
	}
	return f
}

func (a *testApp) release(t *testing.T, f reclaim.Hold) {
	t.Helper()
	if err := f.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// gcDelete deletes through the middleware the way GC does: without
// recording access.
func (a *testApp) gcDelete(t *testing.T, path string) {
	t.Helper()
	if err := a.env.Driver.Delete(WithoutAccessRecords(context.Background()), path); err != nil {
		t.Fatalf("GC delete %s: %v", path, err)
	}
}

func statusOf(err error) int {
	var te *transport.Error
	if errors.As(err, &te) {
		return te.StatusCode
	}
	return 0
}

func layerDigest(t *testing.T, img v1.Image, i int) digest.Digest {
	_, blobs := imageDigests(t, img)
	return blobs[i]
}

// pushImage pushes a fresh one-layer image as ref and returns it and its
// layer's digest.
func (a *testApp) pushImage(t *testing.T, ref string) (v1.Image, digest.Digest) {
	t.Helper()
	img, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.push(ref, img); err != nil {
		t.Fatal(err)
	}
	return img, layerDigest(t, img, 1)
}

// interleavings are the cases of docs/gc-protocol.md, each run on a fresh
// app whose epoch is a window old.
var interleavings = []struct {
	name string
	run  func(t *testing.T, a *testApp)
}{
	{"AccessBeforeFence", accessBeforeFence},
	{"UploadCommitMeetsBlobFence", uploadCommitMeetsBlobFence},
	{"UploadCommitWaitsOutFence", uploadCommitWaitsOutFence},
	{"ManifestPutMeetsLinkFence", manifestPutMeetsLinkFence},
	{"TagMoveMeetsRevisionFence", tagMoveMeetsRevisionFence},
	{"IndexChildMeetsFence", indexChildMeetsFence},
	{"MountMeetsFence", mountMeetsFence},
	{"PullMeetsBlobFence", pullMeetsBlobFence},
	{"StaleCacheAfterGC", staleCacheAfterGC},
}

func TestInterleavings(t *testing.T) {
	storagetest.ForEachBackend(t, func(t *testing.T, b storagetest.Backend) {
		for _, cache := range []string{"", "inmemory", "redis"} {
			if skipCache(b, cache) {
				continue
			}
			t.Run("cache="+cache, func(t *testing.T) {
				for _, tc := range interleavings {
					t.Run(tc.name, func(t *testing.T) { tc.run(t, newWindowApp(t, b, cache)) })
				}
			})
		}
	})
}

// Access first: whatever was touched within the window cannot be fenced.
func accessBeforeFence(t *testing.T, a *testApp) {
	ctx := context.Background()
	_, x := a.pushImage(t, "r:v1")
	// a window long enough for a slow push on a loaded machine
	for _, o := range []reclaim.Object{{Blob: x}, {Blob: x, Repo: "r", Kind: reclaim.LinkLayer}} {
		if _, err := a.env.Tracker.Fence(ctx, o, 10*time.Second, time.Minute); !errors.Is(err, reclaim.ErrRecentlyAccessed) {
			t.Fatalf("fence %v right after the push: %v", o, err)
		}
	}
	a.age(t)
	a.headBlob("r", x) // a pull renews the protection
	if _, err := a.env.Tracker.Fence(ctx, reclaim.Object{Blob: x}, testWindow, time.Minute); !errors.Is(err, reclaim.ErrRecentlyAccessed) {
		t.Fatalf("fence right after a HEAD: %v", err)
	}
}

// GC fenced an orphan blob; a client pushes an image containing it.
// The commit waits, then fails 503 with Retry-After; once GC deleted
// and released, the retried push uploads the blob again: complete image.
func uploadCommitMeetsBlobFence(t *testing.T, a *testApp) {
	ctx := context.Background()
	img, x := a.pushImage(t, "old:v1")
	a.gcDelete(t, layout.LayerLinkPath("old", x)) // old no longer links x
	a.age(t)
	f := a.fence(t, reclaim.Object{Blob: x})
	err := a.push("new:v1", img, noRetry)
	if statusOf(err) != http.StatusServiceUnavailable {
		t.Fatalf("push during fence: %v, want 503", err)
	}
	if _, err := a.env.Links.List(ctx, x); err != nil {
		t.Fatal(err)
	}
	if has, _ := a.env.Links.Has(ctx, x, reclaim.RepoLink{Repo: "new", Kind: reclaim.LinkLayer}); has {
		t.Fatal("a refused commit left a reverse link")
	}
	a.gcDelete(t, layout.BlobDir(x))
	a.release(t, f)
	if err := a.push("new:v1", img); err != nil {
		t.Fatalf("retried push: %v", err)
	}
	a.pullAll("new:v1")
	checkLinkDB(t, a.env.Raw)
}

// GC fences, looks again, decides to keep the blob and releases within
// FenceWait: the commit waits and succeeds without the client noticing.
func uploadCommitWaitsOutFence(t *testing.T, a *testApp) {
	ctx := context.Background()
	img, _ := random.Image(256, 1)
	x := layerDigest(t, img, 1)
	if err := a.env.Tracker.StartRecording(ctx); err != nil {
		t.Fatal(err)
	}
	f := a.fence(t, reclaim.Object{Blob: x})
	waiting := watchFenced(a)
	go func() {
		<-waiting.C // the commit met the fence and polls
		_ = f.Release(ctx)
	}()
	if err := a.push("r:v1", img, noRetry); err != nil {
		t.Fatalf("push: %v", err)
	}
	a.pullAll("r:v1")
}

// The client uploaded its layers but is slower than the window to PUT
// the manifest; GC of the repository fences the unreferenced layer
// link. The manifest PUT fails 503; once GC deleted the link, the retry
// says the blob is unknown and the client pushes again: never a
// manifest that references a deleted link.
func manifestPutMeetsLinkFence(t *testing.T, a *testApp) {
	img, _ := random.Image(256, 2)
	layers, _ := img.Layers()
	for _, l := range layers {
		if err := remote.WriteLayer(a.ref("r:v1").Context(), l); err != nil {
			t.Fatal(err)
		}
	}
	cfg, _ := partial.ConfigLayer(img)
	if err := remote.WriteLayer(a.ref("r:v1").Context(), cfg); err != nil {
		t.Fatal(err)
	}
	x := layerDigest(t, img, 1)
	a.age(t)
	f := a.fence(t, reclaim.Object{Blob: x, Repo: "r", Kind: reclaim.LinkLayer})
	err := remote.Put(a.ref("r:v1"), img, noRetry)
	if statusOf(err) != http.StatusServiceUnavailable {
		t.Fatalf("manifest PUT during link fence: %v, want 503", err)
	}
	a.gcDelete(t, layout.LayerLinkPath("r", x))
	a.release(t, f)
	err = remote.Put(a.ref("r:v1"), img, noRetry)
	if statusOf(err) != http.StatusBadRequest || !strings.Contains(err.Error(), "BLOB_UNKNOWN") {
		t.Fatalf("manifest PUT after GC: %v, want 400 BLOB_UNKNOWN", err)
	}
	if err := a.push("r:v1", img); err != nil {
		t.Fatal(err)
	}
	a.pullAll("r:v1")
	checkLinkDB(t, a.env.Raw)
}

// A tag moves back to an untagged manifest whose revision link GC is
// deleting: the revision link write is refused (503), never written
// under GC's feet.
func tagMoveMeetsRevisionFence(t *testing.T, a *testApp) {
	img1 := a.pushRandom("r:v1", 1)
	a.pushRandom("r:v1", 1) // img1 is now untagged
	m1, _ := imageDigests(t, img1)
	a.age(t)
	f := a.fence(t, reclaim.Object{Blob: m1, Repo: "r", Kind: reclaim.LinkManifest})
	if err := remote.Tag(a.ref("r:v1").Context().Tag("again"), img1, noRetry); statusOf(err) != http.StatusServiceUnavailable {
		t.Fatalf("re-tag during revision fence: %v, want 503", err)
	}
	a.release(t, f) // GC re-checked and kept it
	if err := remote.Tag(a.ref("r:v1").Context().Tag("again"), img1); err != nil {
		t.Fatal(err)
	}
	a.pullAll("r:again")
	checkLinkDB(t, a.env.Raw)
}

// An index whose child manifest's revision link is being deleted: the
// index PUT is refused.
func indexChildMeetsFence(t *testing.T, a *testApp) {
	idx, _ := random.Index(128, 1, 2)
	im, _ := idx.IndexManifest()
	for _, m := range im.Manifests {
		child, _ := idx.Image(m.Digest)
		if err := remote.Write(a.ref("r@"+m.Digest.String()), child); err != nil {
			t.Fatal(err)
		}
	}
	a.age(t)
	child := digest.Digest(im.Manifests[0].Digest.String())
	f := a.fence(t, reclaim.Object{Blob: child, Repo: "r", Kind: reclaim.LinkManifest})
	if err := remote.Put(a.ref("r:idx"), idx, noRetry); statusOf(err) != http.StatusServiceUnavailable {
		t.Fatalf("index PUT during child fence: %v, want 503", err)
	}
	a.release(t, f)
	if err := remote.Put(a.ref("r:idx"), idx); err != nil {
		t.Fatal(err)
	}
	checkLinkDB(t, a.env.Raw)
}

// A mount from a repository whose blob is fenced does not link it: the
// registry answers 202 (start an upload) instead of 201.
func mountMeetsFence(t *testing.T, a *testApp) {
	ctx := context.Background()
	_, x := a.pushImage(t, "src:v1")
	a.age(t)
	f := a.fence(t, reclaim.Object{Blob: x})
	if code := a.mount("dst", "src", x); code != http.StatusAccepted {
		t.Fatalf("mount during fence = %d, want 202", code)
	}
	if has, _ := a.env.Links.Has(ctx, x, reclaim.RepoLink{Repo: "dst", Kind: reclaim.LinkLayer}); has {
		t.Fatal("mount linked a fenced blob")
	}
	a.release(t, f)
	if code := a.mount("dst", "src", x); code != http.StatusCreated {
		t.Fatalf("mount after release = %d, want 201", code)
	}
	checkLinkDB(t, a.env.Raw)
}

// A pull that meets a fence on blob data gets "blob unknown", never a
// truncated body. (GC only fences unlinked blobs; the link is kept here
// to reach the data path.)
func pullMeetsBlobFence(t *testing.T, a *testApp) {
	_, x := a.pushImage(t, "r:v1")
	if code := a.headBlob("r", x); code != http.StatusOK {
		t.Fatalf("HEAD = %d", code)
	}
	a.age(t)
	f := a.fence(t, reclaim.Object{Blob: x})
	if code := a.headBlob("r", x); code != http.StatusNotFound {
		t.Fatalf("HEAD during fence = %d, want 404", code)
	}
	if code := a.getBlob("r", x); code != http.StatusNotFound {
		t.Fatalf("GET during fence = %d, want 404", code)
	}
	a.release(t, f)
	if code := a.getBlob("r", x); code != http.StatusOK {
		t.Fatalf("GET after release = %d", code)
	}
}

// After GC deleted a blob, the blob descriptor cache must not answer
// for it: HEAD says 404 and a re-push uploads it again.
func staleCacheAfterGC(t *testing.T, a *testApp) {
	img, x := a.pushImage(t, "r:v1")
	if code := a.headBlob("r", x); code != http.StatusOK { // fills the cache
		t.Fatalf("HEAD = %d", code)
	}
	m, _ := imageDigests(t, img)
	a.gcDelete(t, layout.TagCurrentPath("r", "v1")[:len(layout.TagCurrentPath("r", "v1"))-len("/current/link")])
	a.gcDelete(t, layout.RevisionLinkPath("r", m))
	a.gcDelete(t, layout.LayerLinkPath("r", x))
	a.gcDelete(t, layout.BlobDir(x))
	if code := a.headBlob("r", x); code != http.StatusNotFound {
		t.Fatalf("HEAD after GC = %d, want 404", code)
	}
	if err := a.push("r:v1", img); err != nil {
		t.Fatal(err)
	}
	a.pullAll("r:v1")
	checkLinkDB(t, a.env.Raw)
}
