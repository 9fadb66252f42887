package middleware

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	rediscache "github.com/distribution/distribution/v3/registry/storage/cache/redis"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/opencontainers/go-digest"
	v1spec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/redis/go-redis/v9"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

// These tests force races on the path a client's request takes: the real
// app, the request scope, the blob descriptor cache (none, inmemory, redis)
// and the per-process read dedup. Each pauses one request at an exact
// storage call (a storagetest.Gate in the testhook middleware, below reclaim)
// while another request runs, then judges the end state by invariants: a
// forward link always has its reverse link, and what the registry
// acknowledged pulls completely.

// forEachCache runs f for every backend and each blob descriptor cache kind.
func forEachCache(t *testing.T, caches []string, f func(t *testing.T, a *testApp)) {
	storagetest.ForEachBackend(t, func(t *testing.T, b storagetest.Backend) {
		for _, cache := range caches {
			if skipCache(b, cache) {
				continue
			}
			t.Run("cache="+cache, func(t *testing.T) {
				f(t, newTestApp(t, appOptions{cache: cache, redisAddr: b.Addr, prefix: b.Prefix}))
			})
		}
	})
}

// paused runs first until it reaches the call g pauses (one g.Match
// accepts, when set), runs meanwhile, then lets first go on and returns
// its result.
func paused[T any](t *testing.T, g *storagetest.Gate, first func() T, meanwhile func()) T {
	t.Helper()
	testHook.Set(t, func(ctx context.Context, m, p string) error {
		if g.Match != nil && !g.Match(ctx) {
			return nil
		}
		return g.Wait(ctx, m, p)
	})
	ch := make(chan T, 1)
	go func() { ch <- first() }()
	select {
	case <-g.Reached:
	case <-time.After(30 * time.Second):
		t.Fatalf("no %s on a path containing %s", g.Method, g.Substr)
	}
	meanwhile()
	g.Release()
	return <-ch
}

// putManifest PUTs img's manifest as repo:ref and returns the status.
func (a *testApp) putManifest(repo, ref string, img v1.Image) int {
	a.t.Helper()
	raw, err := img.RawManifest()
	if err != nil {
		a.t.Fatal(err)
	}
	mt, err := img.MediaType()
	if err != nil {
		a.t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPut, fmt.Sprintf("%s/v2/%s/manifests/%s", a.srv.URL, repo, ref), bytes.NewReader(raw))
	if err != nil {
		a.t.Fatal(err)
	}
	req.Header.Set("Content-Type", string(mt))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// requireReverseLinks fails for every forward link without its reverse link
// (invariant 2). Stale reverse links are a leak and allowed here.
func requireReverseLinks(t *testing.T, a *testApp) {
	t.Helper()
	fwd, rev := walkLinkDB(t, a.env.Raw)
	for p := range fwd {
		if !rev[p] {
			t.Errorf("forward link without its reverse link: %s", p)
		}
	}
}

// orphanLayer pushes img to repo:tag, deletes its manifest through the API,
// and then deletes the layer link and data of layer i the way GC does. The
// blob descriptor cache still holds the layer: the stale entry these races
// are about.
func orphanLayer(t *testing.T, a *testApp, repo string, img v1.Image, i int) digest.Digest {
	t.Helper()
	if err := a.push(repo+":v1", img); err != nil {
		t.Fatal(err)
	}
	m, blobs := imageDigests(t, img)
	if code := a.do(http.MethodDelete, fmt.Sprintf("/v2/%s/manifests/%s", repo, m)).StatusCode; code != http.StatusAccepted {
		t.Fatalf("DELETE manifest = %d", code)
	}
	x := blobs[i]
	a.gcDelete(t, layout.LayerLinkPath(repo, x))
	a.gcDelete(t, layout.BlobDir(x))
	a.staleCacheEntry(t, repo, x)
	return x
}

// staleCacheEntry puts repo's entry for x back into a redis blob descriptor
// cache after GC's delete dropped it: what a HEAD that read the storage
// before the delete and wrote the cache after it does. The inmemory cache
// keeps its entry anyway.
func (a *testApp) staleCacheEntry(t *testing.T, repo string, x digest.Digest) {
	t.Helper()
	if a.opts.cache == "redis" {
		// GC's delete dropped Distribution's redis cache entries; a HEAD
		// that read the storage before the delete and wrote the cache
		// after it puts them back. Do what it does.
		c := redis.NewClient(&redis.Options{Addr: a.opts.redisAddr})
		defer c.Close()
		desc := v1spec.Descriptor{Digest: x, Size: 256, MediaType: "application/octet-stream"}
		cp := rediscache.NewRedisBlobDescriptorCacheProvider(c)
		scoped, err := cp.RepositoryScoped(repo)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if err := errors.Join(cp.SetDescriptor(ctx, x, desc), scoped.SetDescriptor(ctx, x, desc)); err != nil {
			t.Fatal(err)
		}
	}
}

// Race 1. A manifest PUT re-writes a revision link while a DELETE of the
// same manifest removes it. The PUT is paused after its reverse link and
// before its forward link; the DELETE runs to completion in between. The
// PUT's forward link must not end up without its reverse link.
func TestRaceManifestPutVsDelete(t *testing.T) {
	forEachCache(t, []string{"", "inmemory", "redis"}, func(t *testing.T, a *testApp) {
		img := a.pushRandom("r:v1", 2)
		m, _ := imageDigests(t, img)
		g := storagetest.NewGate("PutContent", "repositories/r/_manifests/revisions/sha256/"+m.Encoded()+"/link")
		put := paused(t, g, func() int { return a.putManifest("r", "v1", img) }, func() {
			if code := a.do(http.MethodDelete, "/v2/r/manifests/"+m.String()).StatusCode; code != http.StatusAccepted {
				t.Fatalf("DELETE during the PUT = %d, want 202", code)
			}
		})
		if put != http.StatusCreated {
			t.Fatalf("PUT = %d, want 201", put)
		}
		requireReverseLinks(t, a)
		// The PUT wrote its links after the DELETE: the image is there.
		a.pullAll("r:v1")
	})
}

// Race 1, the other order: the DELETE is paused after it removed both
// links, before it looks at the forward link again; the PUT runs to
// completion in between, and the DELETE's look puts the reverse link back.
func TestRaceManifestDeleteVsPut(t *testing.T) {
	forEachCache(t, []string{"", "inmemory"}, func(t *testing.T, a *testApp) {
		img := a.pushRandom("r:v1", 2)
		m, _ := imageDigests(t, img)
		// the DELETE reads the link with GetContent; its only Stat of
		// the forward link is unlink's look after removing both links
		g := storagetest.NewGate("Stat", layout.RevisionLinkPath("r", m))
		del := paused(t, g, func() int { return a.do(http.MethodDelete, "/v2/r/manifests/"+m.String()).StatusCode }, func() {
			if code := a.putManifest("r", "v1", img); code != http.StatusCreated {
				t.Fatalf("PUT during the DELETE = %d, want 201", code)
			}
		})
		if del != http.StatusAccepted {
			t.Fatalf("DELETE = %d, want 202", del)
		}
		requireReverseLinks(t, a)
	})
}

// Race 2. A request finds a deletion tombstone and checks the storage
// behind the stale cache entry; a re-push of the blob commits between that
// check and the cache clear. Distribution's statter Clear also deletes the
// repository's layer link: the fresh one the push just wrote. The request
// is a HEAD, or a mount whose check reads the source repository's entry.
func TestRaceStaleCacheCheckVsReupload(t *testing.T) {
	for _, tc := range []struct {
		name string
		do   func(a *testApp, x digest.Digest) int
		want int // the checking request's answer: it saw the blob gone
	}{
		{"head", func(a *testApp, x digest.Digest) int { return a.headBlob("src", x) }, http.StatusNotFound},
		// the mount falls back to an upload
		{"mount", func(a *testApp, x digest.Digest) int { return a.mount("dst", "src", x) }, http.StatusAccepted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forEachCache(t, []string{"inmemory", "redis"}, func(t *testing.T, a *testApp) {
				img, _ := random.Image(256, 2)
				x := orphanLayer(t, a, "src", img, 1)
				// the check's last look at the storage is src's
				// revision-link path of x
				g := storagetest.NewGate("Stat", layout.RevisionLinkPath("src", x))
				code := paused(t, g, func() int { return tc.do(a, x) }, func() {
					if err := a.push("src:v1", img); err != nil {
						t.Fatalf("re-push while a %s checks the stale entry: %v", tc.name, err)
					}
				})
				if code != tc.want {
					t.Errorf("%s that saw the blob gone = %d, want %d", tc.name, code, tc.want)
				}
				if _, err := a.env.Raw.Stat(context.Background(), layout.LayerLinkPath("src", x)); err != nil {
					t.Fatalf("the re-pushed layer link is gone: %v", err)
				}
				requireReverseLinks(t, a)
				a.pullAll("src:v1")
			})
		})
	}
}

// Race 4. A check behind a tombstone (verify) found the blob data and the
// repository's link; before it cleared the tombstone it had seen, a DELETE
// of the link (here on the same instance, on any in production) wrote a
// fresh one. The check cleared that one too, and with it the only thing
// that tells another instance's blob descriptor cache its entry is stale:
// that instance's HEAD answered 200 and its manifest PUT verified against
// the deleted link (issue 24). The check may clear only the tombstones it
// saw, by value.
func TestRaceStaleCacheCheckVsDelete(t *testing.T) {
	for _, tc := range []struct {
		name string
		do   func(b *testApp, img v1.Image, x digest.Digest) int
		want int // the other instance's answer: the link is gone
	}{
		{"head", func(b *testApp, _ v1.Image, x digest.Digest) int { return b.headBlob("r", x) }, http.StatusNotFound},
		{"manifest put", func(b *testApp, img v1.Image, _ digest.Digest) int { return b.putManifest("r", "v2", img) }, http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			storagetest.ForEachBackend(t, func(t *testing.T, be storagetest.Backend) {
				for _, cache := range []string{"inmemory", "redis"} {
					if skipCache(be, cache) {
						continue
					}
					t.Run("cache="+cache, func(t *testing.T) {
						o := appOptions{cache: cache, redisAddr: be.Addr, prefix: be.Prefix}
						a := newTestApp(t, o)
						o.root = a.root
						b := newTestApp(t, o) // a second instance on the same storage and Redis
						raceCheckVsDelete(t, a, b, tc.do, tc.want)
					})
				}
			})
		})
	}
}

func raceCheckVsDelete(t *testing.T, a, b *testApp, do func(b *testApp, img v1.Image, x digest.Digest) int, want int) {
	img := a.pushRandom("r:v1", 2)
	_, blobs := imageDigests(t, img)
	x := blobs[1]
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if code := b.headBlob("r", x); code != http.StatusOK { // b's cache now holds r's entry for x
		t.Fatalf("HEAD on b = %d", code)
	}
	// A tombstone whose object is back: the link was deleted and the
	// layer uploaded again (an upload does not clear it).
	if code := a.do(http.MethodDelete, fmt.Sprintf("/v2/r/blobs/%s", x)).StatusCode; code != http.StatusAccepted {
		t.Fatalf("DELETE blob = %d", code)
	}
	if err := remote.WriteLayer(a.ref("r:v1").Context(), layers[0]); err != nil {
		t.Fatal(err)
	}
	link := reclaim.Object{Blob: x, Repo: "r", Kind: reclaim.LinkLayer}
	if a.tombstone(t, link) == "" {
		t.Fatal("no tombstone after the delete and re-upload (the setup is wrong)")
	}
	// a's HEAD meets the tombstone and checks the storage; its last look
	// is r's revision-link path of x. It pauses right after that Stat.
	g := storagetest.NewGate("Stat", layout.RevisionLinkPath("r", x))
	g.Match = inRequest(http.MethodHead, "/blobs/")
	// Its answer does not matter: 200 (it saw the link), or Distribution's
	// 500 when its second Stat of the request finds the link gone.
	var fresh string
	pausedAfter(t, g, func() int { return a.headBlob("r", x) }, func() {
		if code := a.do(http.MethodDelete, fmt.Sprintf("/v2/r/blobs/%s", x)).StatusCode; code != http.StatusAccepted {
			t.Fatalf("DELETE blob while a HEAD checks = %d", code)
		}
		if fresh = a.tombstone(t, link); fresh == "" {
			t.Fatal("the DELETE left no tombstone")
		}
		// a HEAD on b that read the storage before the DELETE and wrote
		// the redis cache after it (the inmemory cache keeps its entry)
		b.staleCacheEntry(t, "r", x)
	})
	if got := a.tombstone(t, link); got != fresh {
		t.Errorf("the DELETE's tombstone %q was cleared by a check that had seen an older one (now %q)", fresh, got)
	}
	b.forgetDedup() // b's first HEAD is in its read dedup (1 s)
	if code := do(b, img, x); code != want {
		t.Errorf("b, whose blob descriptor cache holds r's deleted link to x, answered %d, want %d", code, want)
	}
}

// tombstone is the value of o's deletion tombstone, "" when there is none.
func (a *testApp) tombstone(t *testing.T, o reclaim.Object) string {
	t.Helper()
	prefix := a.opts.prefix
	if prefix == "" {
		prefix = "reclaim:"
	}
	key := prefix + "{" + o.Blob.String() + "}:gone"
	if o.Repo != "" {
		key += ":" + o.Repo
	}
	v, err := a.env.Tracker.Client().Get(context.Background(), key).Result()
	if errors.Is(err, redis.Nil) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// A mount that falls back to an upload (the source does not link the blob)
// writes nothing, so it must not clear the target's deletion tombstone:
// the target's stale cache entry would then answer "exists" for a blob the
// target no longer links, and a client that trusts it would push a
// manifest whose layer its repository does not link.
func TestFailedMountKeepsTombstones(t *testing.T) {
	forEachCache(t, []string{"inmemory", "redis"}, func(t *testing.T, a *testApp) {
		img := a.pushRandom("dst:v1", 2)
		a.pushRandom("other:v1", 1)
		_, blobs := imageDigests(t, img)
		x := blobs[1]
		a.gcDelete(t, layout.LayerLinkPath("dst", x)) // the data stays: only the link goes
		a.staleCacheEntry(t, "dst", x)
		if code := a.mount("dst", "other", x); code != http.StatusAccepted {
			t.Fatalf("mount from a repository that does not link the blob = %d, want 202", code)
		}
		if code := a.headBlob("dst", x); code != http.StatusNotFound {
			t.Fatalf("HEAD of a blob dst no longer links, after a failed mount = %d, want 404", code)
		}
	})
}

// Race 3. While one HEAD checks the storage behind a tombstone, a second
// HEAD of the same blob must not answer "exists" from the stale cache
// because the first one's touch is in the process's read dedup. A client
// that believed it would skip the upload and push a manifest whose layer is
// gone.
func TestRaceDedupHidesTombstone(t *testing.T) {
	forEachCache(t, []string{"inmemory", "redis"}, func(t *testing.T, a *testApp) {
		img, _ := random.Image(256, 2)
		x := orphanLayer(t, a, "r", img, 1)
		g := storagetest.NewGate("Stat", layout.BlobDataPath(x))
		first := paused(t, g, func() int { return a.headBlob("r", x) }, func() {
			if code := a.headBlob("r", x); code != http.StatusNotFound {
				t.Errorf("concurrent HEAD of a deleted blob = %d, want 404", code)
			}
			// a client pushing now uploads what HEAD says is missing, and
			// its manifest PUT is verified against Redis, not the dedup
			if err := a.push("r:v1", img); err != nil {
				t.Fatalf("push: %v", err)
			}
		})
		// the first HEAD looked at the storage only after the push
		if first != http.StatusOK {
			t.Errorf("HEAD = %d, want 200", first)
		}
		requireReverseLinks(t, a)
		a.pullAll("r:v1")
	})
}

// The check behind a tombstone fails closed: a storage error is a
// retryable 503, never the cached "exists".
func TestStaleCacheCheckFailsClosed(t *testing.T) {
	forEachCache(t, []string{"inmemory", "redis"}, func(t *testing.T, a *testApp) {
		img, _ := random.Image(256, 2)
		x := orphanLayer(t, a, "r", img, 1)
		testHook.Set(t, func(_ context.Context, m, p string) error {
			if m == "Stat" && p == layout.BlobDataPath(x) {
				return errors.New("injected: storage unavailable")
			}
			return nil
		})
		if code := a.headBlob("r", x); code != http.StatusServiceUnavailable {
			t.Errorf("HEAD while the storage check fails = %d, want 503", code)
		}
	})
}

// A manifest PUT writes the revision link, then the tag. A push that
// stalls longer than the window in between must not end with a tag that
// points at a revision link GC deleted meanwhile: the tag write checks the
// revision link and fails the PUT with a retryable 503 instead, and the
// retry writes everything again.
func TestTagWriteMeetsCollectedRevision(t *testing.T) {
	storagetest.ForEachBackend(t, func(t *testing.T, b storagetest.Backend) {
		for _, cache := range []string{"", "inmemory"} {
			t.Run("cache="+cache, func(t *testing.T) {
				a := newWindowApp(t, b, cache)
				img, _ := random.Image(256, 1)
				m, _ := imageDigests(t, img)
				// Distribution writes the tag's index link just before
				// its current link: pause there
				g := storagetest.NewGate("PutContent", "/_manifests/tags/v1/index/")
				err := paused(t, g, func() error { return a.push("r:v1", img, noRetry) }, func() {
					// the push stalls for longer than the window; GC sees
					// an untagged revision link nobody touched and deletes it
					a.age(t)
					f := a.fence(t, reclaim.Object{Blob: m, Repo: "r", Kind: reclaim.LinkManifest})
					a.gcDelete(t, layout.RevisionLinkPath("r", m))
					a.release(t, f)
				})
				if statusOf(err) != http.StatusServiceUnavailable {
					t.Fatalf("manifest PUT whose revision link was collected before its tag: %v, want 503", err)
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
