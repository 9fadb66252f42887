package registry_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	ggcrv1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/linkdb"
)

// The referrers index follows the revision link through requests cut off
// and requests that pause, forced with storage hooks through HTTP on both
// descriptor caches (docs/referrers.md, "Consistency"). Each ends with the
// index as the link ends up: no stale entry (a referrer listed that is
// gone), no missing one (a referrer stored and not listed).

// referrerFixture pushes an image to r:v1 and a referrer of it, and returns
// the referrer's descriptor, its manifest bytes and its subject.
func referrerFixture(t *testing.T, g *gcRegistry) (ggcrv1.Descriptor, []byte, ggcrv1.Hash) {
	t.Helper()
	img := registrytest.Image(t, layer(t))
	push(t, g, "r:v1", img)
	subject := registrytest.Describe(t, img)
	art := registrytest.PushArtifact(t, g.Registry, "r", subject)
	resp := g.Do(t, http.MethodGet, "/v2/r/manifests/"+art.Digest.String(), http.Header{"Accept": {string(art.MediaType)}})
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("get referrer: %d %v", resp.StatusCode, err)
	}
	if n := referrersCount(t, g, "r", subject.Digest); n != 1 {
		t.Fatalf("referrers after the push: %d, want 1", n)
	}
	return art, raw, subject.Digest
}

// manifestRequest sends a PUT (body) or DELETE of manifest reference in r
// on ctx and returns the status, or the error of a request cut off.
func manifestRequest(ctx context.Context, t *testing.T, g *gcRegistry, method, reference, mediaType string, body []byte) (int, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, g.URL+"/v2/r/manifests/"+reference, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", mediaType)
	}
	if g.Username != "" {
		req.SetBasicAuth(g.Username, g.Password)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// honourCancel makes every driver call below the middleware fail once its
// context is cancelled, as the S3 driver's do: the filesystem driver
// ignores cancellation, which would hide what a client that goes away
// leaves behind on a remote store.
func honourCancel(t *testing.T) {
	setHook(t, func(ctx context.Context, _, _ string) error { return ctx.Err() })
}

// cutOffAfter makes the first call of method on path cancel the client's
// request (cancel) once the call has done its work, and wait until the
// server has seen the client go.
func cutOffAfter(t *testing.T, method, path string, cancel context.CancelFunc) {
	var once sync.Once
	gcHook.SetAfter(t, func(ctx context.Context, m, p string, err error) {
		if m != method || p != path || err != nil {
			return
		}
		once.Do(func() {
			cancel()
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Second):
				t.Error("the request's context was not cancelled after its client went away")
			}
		})
	})
}

// A client's request goes away right after Distribution changed the
// referrer's revision link (found by TestSoakS3: DELETEs cut off when the
// workload ended left stale entries): a DELETE right after the link delete,
// a PUT by tag right after the link write, before the tag (Distribution
// answers with an error, but the manifest is stored). The index upkeep runs
// on, on a context of its own: the entry ends as the link does.
func TestE2EReferrerRequestCutOff(t *testing.T) {
	for _, c := range []struct {
		name        string
		unlinked    bool   // the referrer deleted before the request
		method, ref string // the request: "" is the referrer's digest
		cutAfter    string // the driver call on the revision link
		wantStatus  int    // the referrer's manifest afterwards
		wantEntries int
	}{
		{"DELETE leaves no entry", false, http.MethodDelete, "", "Delete", http.StatusNotFound, 0},
		{"PUT by tag is indexed", true, http.MethodPut, "sig", "PutContent", http.StatusOK, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			onEachCacheGC(t, func(t *testing.T, g *gcRegistry) {
				art, raw, subject := referrerFixture(t, g)
				if c.unlinked {
					if code, err := manifestRequest(t.Context(), t, g, http.MethodDelete, art.Digest.String(), "", nil); err != nil || code != http.StatusAccepted {
						t.Fatalf("DELETE: %d %v", code, err)
					}
				}
				ref, body := c.ref, raw
				if ref == "" {
					ref = art.Digest.String()
				}
				if c.method != http.MethodPut {
					body = nil
				}
				honourCancel(t)
				ctx, cancel := context.WithCancel(t.Context())
				cutOffAfter(t, c.cutAfter, layout.RevisionLinkPath("r", digest.Digest(art.Digest.String())), cancel)
				if code, err := manifestRequest(ctx, t, g, c.method, ref, string(art.MediaType), body); err == nil {
					t.Fatalf("%s answered %d: the client was not cut off", c.method, code)
				}
				g.WaitIdle(t)
				if s := registrytest.ManifestStatus(t, g.Registry, "r@"+art.Digest.String()); s != c.wantStatus {
					t.Fatalf("referrer answers %d after the %s, want %d: the cut-off did not come after the link changed", s, c.method, c.wantStatus)
				}
				if n := referrersCount(t, g, "r", subject); n != c.wantEntries {
					t.Errorf("referrers after the %s: %d, want %d", c.method, n, c.wantEntries)
				}
				wantIndexFollowsLinks(t, g)
			})
		})
	}
}

// A DELETE's upkeep looks at the revision link, finds it there (a PUT of
// the same referrer re-linked it after the DELETE removed it), and pauses
// right after the look; a second DELETE then removes the link and the
// entry. The first DELETE goes on: it must not put back an entry for a
// link that is gone. A single look-then-update did (a stale entry); the
// upkeep looks again after each update until a look agrees.
func TestE2EReferrerUpkeepLooksAgainAfterAPause(t *testing.T) {
	onEachCacheGC(t, func(t *testing.T, g *gcRegistry) {
		art, raw, subject := referrerFixture(t, g)
		link := layout.RevisionLinkPath("r", digest.Digest(art.Digest.String()))
		var (
			mu                           sync.Mutex
			armed                        bool
			onceDelete, onceStat         sync.Once
			deleted, looked              = make(chan struct{}), make(chan struct{})
			releaseDelete, releaseLooked = make(chan struct{}), make(chan struct{})
		)
		gcHook.SetAfter(t, func(ctx context.Context, m, p string, err error) {
			if p != link || err != nil {
				return
			}
			switch {
			case m == "Delete":
				onceDelete.Do(func() { close(deleted); <-releaseDelete })
			case m == "Stat" && outsideDistribution(ctx):
				mu.Lock()
				on := armed
				mu.Unlock()
				if on {
					onceStat.Do(func() { close(looked); <-releaseLooked })
				}
			}
		})
		first := make(chan int, 1)
		go func() {
			code, _ := manifestRequest(t.Context(), t, g, http.MethodDelete, art.Digest.String(), "", nil)
			first <- code
		}()
		<-deleted // the first DELETE removed the link
		if code, err := manifestRequest(t.Context(), t, g, http.MethodPut, art.Digest.String(), string(art.MediaType), raw); err != nil || code != http.StatusCreated {
			t.Fatalf("PUT again: %d %v", code, err)
		}
		mu.Lock()
		armed = true
		mu.Unlock()
		close(releaseDelete)
		<-looked // the first DELETE's upkeep saw the link the PUT wrote
		if code, err := manifestRequest(t.Context(), t, g, http.MethodDelete, art.Digest.String(), "", nil); err != nil || code != http.StatusAccepted {
			t.Fatalf("second DELETE: %d %v", code, err)
		}
		close(releaseLooked)
		if code := <-first; code != http.StatusAccepted {
			t.Fatalf("first DELETE: %d", code)
		}
		g.WaitIdle(t)
		if s := registrytest.ManifestStatus(t, g.Registry, "r@"+art.Digest.String()); s != http.StatusNotFound {
			t.Fatalf("referrer answers %d after the second DELETE", s)
		}
		if n := referrersCount(t, g, "r", subject); n != 0 {
			t.Errorf("referrers at the end: %d, want 0 (a stale entry)", n)
		}
		wantIndexFollowsLinks(t, g)
	})
}

// wantIndexFollowsLinks runs linkdb verify: no referrers entry without its
// revision link or revision link with a subject without its entry, no
// forward link without its reverse link, and no reverse link left behind
// by a request whose client went away (the middleware finishes a client's
// unlink on a context of its own). A blob no repository links is allowed:
// GC reclaims it.
func wantIndexFollowsLinks(t *testing.T, g *gcRegistry) {
	t.Helper()
	v, err := linkdb.Verify(t.Context(), g.raw, linkdb.VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range v.Findings {
		if f.Kind != linkdb.Reclaimable {
			t.Errorf("linkdb verify: %s %s (%s)", f.Kind, f.Path, f.Detail)
		}
	}
}

// outsideDistribution reports a driver call made outside Distribution's
// request handling (the referrers handler's upkeep): Distribution's
// context answers its route's variables by name (dcontext.WithVars).
func outsideDistribution(ctx context.Context) bool {
	return ctx.Value("vars.name") == nil
}
