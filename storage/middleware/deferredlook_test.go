package middleware

import (
	"bytes"
	"context"
	"crypto/rand"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

// The writer's look after its forward link write runs beside what
// Distribution does next (deferred.go). These tests hold that look at its
// read of the reverse link, after the forward link landed, and let the
// request go on meanwhile: Distribution answers a commit or a manifest PUT
// by digest at once, and writes a PUT's tag index link and reaches its
// current link. While the look is held, the reverse link is removed (what
// a concurrent delete of the same link whose look missed the new forward
// link does) and the reclaimer, finding no reverse link, deletes the data.
// The look then finds the reverse link gone, puts it back, touches, meets
// the tombstone and finds the data gone: the link is withdrawn and the
// request must answer 503, never the 201 Distribution chose while the look
// was held; a PUT by tag must leave the tag where it was. Without the join
// before the status (and before the tag write) the request answered 201.
func TestDeferredLookMeetsReclaimer(t *testing.T) {
	for _, tc := range []struct {
		name string
		// run returns the request's status while the look of the forward
		// link to the returned blob is held (start marks the request)
		run func(t *testing.T, a *testApp, hold func(blob digest.Digest, fwd string, start func() int) int) digest.Digest
	}{
		{"upload commit", func(t *testing.T, a *testApp, hold func(digest.Digest, string, func() int) int) digest.Digest {
			data := make([]byte, 512)
			_, _ = rand.Read(data)
			b := digest.FromBytes(data)
			if code := hold(b, layout.LayerLinkPath("r", b), func() int { return a.upload("r", data) }); code != http.StatusServiceUnavailable {
				t.Errorf("upload commit = %d, want 503", code)
			}
			if code := a.upload("r", data); code != http.StatusCreated {
				t.Fatalf("upload again = %d, want 201", code)
			}
			return b
		}},
		{"manifest PUT by digest", func(t *testing.T, a *testApp, hold func(digest.Digest, string, func() int) int) digest.Digest {
			img := a.pushRandom("r:v1", 1)
			m, _ := imageDigests(t, img)
			if code := hold(m, layout.RevisionLinkPath("r", m), func() int { return a.putManifest("r", m.String(), img) }); code != http.StatusServiceUnavailable {
				t.Errorf("manifest PUT = %d, want 503", code)
			}
			if code := a.putManifest("r", "v1", img); code != http.StatusCreated {
				t.Fatalf("retry = %d, want 201", code)
			}
			a.pullAll("r:v1")
			return m
		}},
		{"manifest PUT by tag", func(t *testing.T, a *testApp, hold func(digest.Digest, string, func() int) int) digest.Digest {
			old := a.pushRandom("r:v1", 1)
			img := a.pushRandom("r:v2", 1)
			m, _ := imageDigests(t, img)
			if code := hold(m, layout.RevisionLinkPath("r", m), func() int { return a.putManifest("r", "v1", img) }); code != http.StatusServiceUnavailable {
				t.Errorf("manifest PUT = %d, want 503", code)
			}
			was, _ := imageDigests(t, old)
			tag, err := a.env.Raw.GetContent(context.Background(), layout.TagCurrentPath("r", "v1"))
			if err != nil || string(tag) != was.String() {
				t.Errorf("tag v1 = %q (%v), want it left at %s", tag, err, was)
			}
			if code := a.putManifest("r", "v1", img); code != http.StatusCreated {
				t.Fatalf("retry = %d, want 201", code)
			}
			a.pullAll("r:v1")
			return m
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forEachWindowCache(t, func(t *testing.T, a *testApp) {
				tc.run(t, a, func(blob digest.Digest, fwd string, start func() int) int {
					return a.heldLook(t, blob, fwd, start)
				})
				requireReverseLinks(t, a)
			})
		})
	}
}

// heldLook runs start, a request that writes the forward link fwd to
// blob, holding its look at the reverse link (the first read of it after
// fwd landed) while the reverse link is removed and the reclaimer deletes
// blob; it returns the request's status once the look went on.
func (a *testApp) heldLook(t *testing.T, blob digest.Digest, fwd string, start func() int) int {
	t.Helper()
	rl := reclaim.RepoLink{Repo: "r", Kind: reclaim.LinkLayer}
	if strings.Contains(fwd, "/_manifests/") {
		rl.Kind = reclaim.LinkManifest
	}
	var landed atomic.Bool
	testHook.SetAfter(t, func(_ context.Context, method, path string, err error) {
		if method == "PutContent" && strings.HasSuffix(path, fwd) && err == nil {
			landed.Store(true)
		}
	})
	g := storagetest.NewGate("GetContent", layout.ReverseLinkPath(blob, "r", rl.Kind))
	g.Match = func(context.Context) bool { return landed.Load() }
	reclaimed := false
	code := paused(t, g, start, func() {
		if err := a.env.Links.Delete(context.Background(), blob, rl); err != nil {
			t.Fatal(err)
		}
		a.age(t)
		reclaimed = a.reclaim(t, blob)
	})
	if !reclaimed {
		t.Fatal("the reclaimer found a reverse link (the interleaving did not happen)")
	}
	if _, err := a.env.Raw.Stat(context.Background(), fwd); err == nil {
		t.Error("the link to the reclaimed data was left behind (linkdb verify: broken_forward)")
	}
	return code
}

// upload pushes data to repo as one blob (a POST, then a PUT with the
// content) and returns the PUT's status.
func (a *testApp) upload(repo string, data []byte) int {
	a.t.Helper()
	resp := a.do(http.MethodPost, "/v2/"+repo+"/blobs/uploads/")
	if resp.StatusCode != http.StatusAccepted {
		a.t.Fatalf("start upload = %d", resp.StatusCode)
	}
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil {
		a.t.Fatal(err)
	}
	q := loc.Query()
	q.Set("digest", digest.FromBytes(data).String())
	loc.RawQuery = q.Encode()
	req, err := http.NewRequest(http.MethodPut, a.srv.URL+loc.Path+"?"+loc.RawQuery, bytes.NewReader(data))
	if err != nil {
		a.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	put, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	put.Body.Close()
	return put.StatusCode
}
