package middleware

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distribution/distribution/v3/configuration"
	_ "github.com/distribution/distribution/v3/registry/auth/silly"
	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/referrers"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
	"github.com/redis/go-redis/v9"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// The validation settings an operator can choose; only "all" (the
// default) makes Distribution itself read every index child.
var indexValidations = []struct {
	name string
	v    configuration.Validation
}{
	{"platforms=all", configuration.Validation{Manifests: configuration.ValidationManifests{
		Indexes: configuration.ValidationIndexes{Platforms: "all"}}}},
	{"platforms=none", configuration.Validation{Manifests: configuration.ValidationManifests{
		Indexes: configuration.ValidationIndexes{Platforms: "none"}}}},
	// the children are linux/amd64: Distribution checks none of them
	{"platforms=list", configuration.Validation{Manifests: configuration.ValidationManifests{
		Indexes: configuration.ValidationIndexes{Platforms: "list",
			PlatformList: []configuration.Platform{{Architecture: "arm64", OS: "linux"}}}}}},
	{"disabled", configuration.Validation{Disabled: true}},
}

var indexTypes = []types.MediaType{types.OCIImageIndex, types.DockerManifestList}

// testIndex is an index of n fresh linux/amd64 images, pushed by digest
// into repo r (the children; the index itself is not pushed).
type testIndex struct {
	mediaType types.MediaType
	raw       []byte
	digest    digest.Digest
	children  []digest.Digest
}

func pushIndexChildren(t *testing.T, a *testApp, mt types.MediaType, n int) *testIndex {
	t.Helper()
	var adds []mutate.IndexAddendum
	ti := &testIndex{mediaType: mt}
	for range n {
		img, err := random.Image(64, 1)
		if err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Write(a.ref("r@"+d.String()), img); err != nil {
			t.Fatalf("push child: %v", err)
		}
		ti.children = append(ti.children, digest.Digest(d.String()))
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
			Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}})
	}
	idx := mutate.IndexMediaType(mutate.AppendManifests(empty.Index, adds...), mt)
	raw, err := idx.RawManifest()
	if err != nil {
		t.Fatal(err)
	}
	ti.raw, ti.digest = raw, digest.FromBytes(raw)
	return ti
}

// putIndex PUTs the index as r:idx and returns the status and Retry-After.
func (a *testApp) putIndex(t *testing.T, ti *testIndex, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, a.srv.URL+"/v2/r/manifests/idx", bytes.NewReader(ti.raw))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", string(ti.mediaType))
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Retry-After")
}

// forgetDedup empties the process's table of recent checks, as on another
// registry instance.
func (a *testApp) forgetDedup() {
	a.env.dedup.mu.Lock()
	a.env.dedup.seen = nil
	a.env.dedup.mu.Unlock()
}

func childObjects(repo string, c digest.Digest) []reclaim.Object {
	return []reclaim.Object{{Blob: c}, {Blob: c, Repo: repo, Kind: reclaim.LinkManifest}, {Blob: c, Repo: repo, Kind: reclaim.LinkLayer}}
}

// The children of an index PUT are fence-checked whatever Distribution's
// index validation does, with and without the blob descriptor cache, for
// OCI indexes and Docker manifest lists, on miniredis and on a real Redis.
func TestIndexChildren(t *testing.T) {
	storagetest.ForEachBackend(t, func(t *testing.T, bk storagetest.Backend) {
		for vi, val := range indexValidations {
			for _, cache := range []string{"", "inmemory"} {
				for ti, mt := range indexTypes {
					if bk.Cluster && !storagetest.ClusterAll() && (vi > 0 || cache != "" || ti > 0) {
						continue // one combination on the cluster: the rest adds 90 s under -race and no new Redis call
					}
					name := fmt.Sprintf("%s/cache=%s/%s", val.name, cache, mt[strings.LastIndex(string(mt), ".")+1:])
					t.Run(name, func(t *testing.T) {
						newApp := func(t *testing.T) (*testApp, storagetest.Backend) {
							var b storagetest.Backend
							for _, c := range storagetest.Backends(t) {
								if c.Name == bk.Name {
									b = c
								}
							}
							v := val.v
							return newTestApp(t, appOptions{window: testWindow, redisAddr: b.Addr, prefix: b.Prefix,
								cache: cache, validation: &v}), b
						}
						t.Run("ChildFencedFirst", func(t *testing.T) {
							a, b := newApp(t)
							testChildFencedFirst(t, a, b, mt)
						})
						t.Run("IndexTouchesFirst", func(t *testing.T) {
							a, b := newApp(t)
							testIndexTouchesFirst(t, a, b, mt)
						})
					})
				}
			}
		}
	})
}

// GC holds the fence on a child's revision link: the index PUT is refused
// with 503 + Retry-After and writes nothing of the index.
func testChildFencedFirst(t *testing.T, a *testApp, b storagetest.Backend, mt types.MediaType) {
	ctx := context.Background()
	ti := pushIndexChildren(t, a, mt, 2)
	a.age(t)
	child := ti.children[1]
	f := a.fence(t, reclaim.Object{Blob: child, Repo: "r", Kind: reclaim.LinkManifest})
	code, retry := a.putIndex(t, ti)
	if code != http.StatusServiceUnavailable || retry == "" {
		t.Fatalf("index PUT while GC fences a child's revision link: %d (Retry-After %q), want 503 with Retry-After", code, retry)
	}
	for _, p := range []string{layout.RevisionLinkPath("r", ti.digest), layout.BlobDataPath(ti.digest), layout.TagCurrentPath("r", "idx")} {
		if _, err := a.env.Raw.Stat(ctx, p); !errors.As(err, new(storagedriver.PathNotFoundError)) {
			t.Errorf("refused index PUT left %s (stat: %v)", p, err)
		}
	}
	if has, err := a.env.Links.Has(ctx, ti.digest, reclaim.RepoLink{Repo: "r", Kind: reclaim.LinkManifest}); err != nil || has {
		t.Errorf("refused index PUT left the index's reverse link (%v, %v)", has, err)
	}
	// GC looked again and kept the child: the retry goes through.
	a.release(t, f)
	if code, _ := a.putIndex(t, ti); code != http.StatusCreated {
		t.Fatalf("index PUT after release: %d, want 201", code)
	}
	checkLinkDB(t, a.env.Raw)
}

// The index PUT is held right before it writes the index's revision link:
// by then every child (blob, revision link, layer link) has been touched,
// and GC can fence none of them.
func testIndexTouchesFirst(t *testing.T, a *testApp, b storagetest.Backend, mt types.MediaType) {
	ctx := context.Background()
	ti := pushIndexChildren(t, a, mt, 2)
	a.age(t)
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	link := layout.RevisionLinkPath("r", ti.digest)
	testHook.Set(t, func(_ context.Context, method, path string) error {
		if method == "PutContent" && path == link {
			once.Do(func() { close(held) })
			<-release
		}
		return nil
	})
	type result struct {
		code  int
		retry string
	}
	done := make(chan result, 1)
	go func() {
		code, retry := a.putIndex(t, ti)
		done <- result{code, retry}
	}()
	select {
	case <-held:
	case r := <-done:
		t.Fatalf("index PUT finished (%d) without writing its revision link", r.code)
	case <-time.After(30 * time.Second):
		t.Fatal("index PUT never reached its revision link write")
	}
	for _, c := range ti.children {
		for _, o := range childObjects("r", c) {
			f, err := a.env.Tracker.Fence(ctx, o, testWindow, time.Minute)
			if f != nil {
				_ = f.Release(ctx)
			}
			if !errors.Is(err, reclaim.ErrRecentlyAccessed) {
				t.Errorf("GC fence on %v while the index PUT is about to link: %v, want ErrRecentlyAccessed", o, err)
			}
		}
	}
	close(release)
	if r := <-done; r.code != http.StatusCreated {
		t.Fatalf("index PUT: %d, want 201", r.code)
	}
	checkLinkDB(t, a.env.Raw)
}

// inflight is a go-redis hook that counts touch scripts and the most that
// ran at once.
type inflight struct {
	touches, trips atomic.Int64
}

func (h *inflight) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *inflight) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		n := int64(0)
		for _, c := range cmds {
			if isTouch(c) {
				n++
			}
		}
		if n > 0 {
			h.touches.Add(n)
			h.trips.Add(1)
		}
		return next(ctx, cmds)
	}
}

func (h *inflight) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !isTouch(cmd) {
			return next(ctx, cmd) // the epoch keeper's script, say
		}
		h.touches.Add(1)
		h.trips.Add(1)
		return next(ctx, cmd)
	}
}

// isTouch tells the access-recording script from the tracker's other
// scripts by its keys: only it passes (access, fence, tombstone) triplets.
func isTouch(cmd redis.Cmder) bool {
	a := cmd.Args() // evalsha, sha, numkeys, keys..., args...
	if cmd.Name() != "evalsha" || len(a) < 6 {
		return false
	}
	gone, _ := a[5].(string)
	return strings.HasSuffix(gone, ":gone")
}

// The children check costs one Redis round trip for all children (one
// pipeline, prefetch.go), plus one for the index itself; with
// platforms=all, Distribution's own reads of the children reuse those
// checks (no second round trip).
func TestIndexChildrenRoundTrips(t *testing.T) {
	storagetest.ForEachBackend(t, func(t *testing.T, b storagetest.Backend) {
		vals := indexValidations[:2] // all, none
		if b.Cluster && !storagetest.ClusterAll() {
			vals = vals[:1]
		}
		for _, val := range vals {
			t.Run(val.name, func(t *testing.T) {
				v := val.v
				// a window (and so a dedup interval, window/20) far above
				// the test's duration: what this request checked stays
				// covered, as in production (dedup 1 s)
				a := newTestApp(t, appOptions{window: time.Hour, redisAddr: b.Addr, prefix: b.Prefix + val.name + ":", validation: &v})
				h := &inflight{}
				a.env.Tracker.Client().AddHook(h)
				for _, n := range []int{0, 1, 32} {
					ti := pushIndexChildren(t, a, types.OCIImageIndex, n)
					a.forgetDedup() // the children were pushed through another instance
					a.rc.Reset()
					h.touches.Store(0)
					h.trips.Store(0)
					if code, _ := a.putIndex(t, ti); code != http.StatusCreated {
						t.Fatalf("index PUT: %d", code)
					}
					cmds := a.rc.Commands()
					t.Logf("%d children: %d round trips (%v), %d of them touches", n, a.rc.Count(), cmds, h.trips.Load())
					// one touch for the index itself, one per child
					if got := h.touches.Load(); got != int64(n+1) {
						t.Errorf("%d children: %d touch scripts, want %d", n, got, n+1)
					}
					if want := int64(min(n, 1) + 1); h.trips.Load() != want {
						t.Errorf("%d children: touches in %d round trips, want %d", n, h.trips.Load(), want)
					}
				}
			})
		}
	})
}

// Authentication comes first: a client that is refused never makes the
// registry touch the digests its body names.
func TestIndexChildrenAfterAuth(t *testing.T) {
	none := indexValidations[1].v
	a := newTestApp(t, appOptions{window: testWindow, validation: &none, auth: true})
	ti := &testIndex{mediaType: types.OCIImageIndex}
	adds := []mutate.IndexAddendum{}
	for range 3 {
		img, _ := random.Image(64, 1)
		adds = append(adds, mutate.IndexAddendum{Add: img})
		d, _ := img.Digest()
		ti.children = append(ti.children, digest.Digest(d.String()))
	}
	ti.raw, _ = mutate.IndexMediaType(mutate.AppendManifests(empty.Index, adds...), types.OCIImageIndex).RawManifest()
	ti.digest = digest.FromBytes(ti.raw)
	a.rc.Reset()
	if code, _ := a.putIndex(t, ti); code != http.StatusUnauthorized {
		t.Fatalf("anonymous index PUT: %d, want 401", code)
	}
	ctx := context.Background()
	for _, c := range ti.children {
		if _, ok, err := a.env.Tracker.LastAccess(ctx, reclaim.Object{Blob: c}); ok || err != nil {
			t.Errorf("anonymous index PUT recorded access to child %s (%v)", c, err)
		}
	}
	if code, _ := a.putIndex(t, ti, "Authorization", "Bearer x"); code != http.StatusCreated {
		t.Fatalf("authenticated index PUT: %d, want 201", code)
	}
	for _, c := range ti.children {
		if _, ok, err := a.env.Tracker.LastAccess(ctx, reclaim.Object{Blob: c, Repo: "r", Kind: reclaim.LinkManifest}); !ok || err != nil {
			t.Errorf("authenticated index PUT did not record child %s (%v)", c, err)
		}
	}
}

func TestIndexWatchChildren(t *testing.T) {
	d1, d2 := digest.FromString("one"), digest.FromString("two")
	index := func(ds ...string) string {
		var ms []string
		for _, d := range ds {
			ms = append(ms, fmt.Sprintf(`{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":%q,"size":1}`, d))
		}
		return `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[` + strings.Join(ms, ",") + `]}`
	}
	image := `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"` + d1.String() + `","size":1},"layers":[]}`
	list := `{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.list.v2+json","manifests":[{"mediaType":"application/vnd.docker.distribution.manifest.v2+json","digest":"` + d2.String() + `","size":1,"platform":{"architecture":"amd64","os":"linux"}}]}`
	for _, tc := range []struct {
		name, ctype, body string
		short             bool // not read to its end
		want              []digest.Digest
		err               bool
	}{
		{name: "index", ctype: "application/vnd.oci.image.index.v1+json", body: index(d1.String(), d2.String(), d1.String(), "sha256:bad"), want: []digest.Digest{d1, d2}},
		{name: "manifest list", ctype: "application/vnd.docker.distribution.manifest.list.v2+json", body: list, want: []digest.Digest{d2}},
		{name: "image manifest", ctype: "application/vnd.oci.image.manifest.v1+json", body: image},
		{name: "unparsable", ctype: "application/vnd.oci.image.index.v1+json", body: `{"schemaVersion":2,"manif`, err: true},
		{name: "not read to its end", ctype: "application/vnd.oci.image.index.v1+json", body: index(d1.String()), short: true, err: true},
		{name: "too large", ctype: "application/vnd.oci.image.index.v1+json", body: index(d1.String()) + strings.Repeat(" ", referrers.MaxManifestSize), err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := http.NewRequest(http.MethodPut, "http://x/v2/a/b/manifests/v1", strings.NewReader(tc.body))
			r.Header.Set("Content-Type", tc.ctype)
			r = watchManifestPut(r)
			w, _ := r.Context().Value(indexWatchKey{}).(*indexWatch)
			if w == nil {
				t.Fatal("manifest PUT not watched")
			}
			if tc.short {
				_, _ = io.ReadFull(r.Body, make([]byte, 10))
			} else {
				_, _ = io.Copy(io.Discard, r.Body)
			}
			var got []digest.Digest
			m, _, err := w.manifest()
			if err == nil {
				got = indexChildrenOf(m)
			}
			if tc.err {
				if !errors.Is(err, errIndexUnchecked) {
					t.Fatalf("children: %v, %v; want errIndexUnchecked", got, err)
				}
				return
			}
			if err != nil || fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("children: %v, %v; want %v", got, err, tc.want)
			}
		})
	}
	for path, want := range map[string]bool{
		"/v2/r/manifests/latest":                true,
		"/v2/a/b/manifests/sha256:00":           true,
		"/prefix/v2/r/manifests/v1":             true,
		"/v2/manifests/blobs/uploads/x":         false,
		"/v2/r/blobs/uploads/x":                 false,
		"/v2/r/manifests/x/blobs/uploads/uuid1": false,
	} {
		if got := isManifestPath(path); got != want {
			t.Errorf("isManifestPath(%q) = %v", path, got)
		}
	}
}
