package middleware

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

// These tests pause a request right AFTER a storage call returned (the
// hook's After side): the existence check is done and answered "there",
// and the request stalls for longer than the window before its link
// write, while GC and the reclaimer delete what the check saw. A stall
// anywhere between a write's existence check and its link write must end
// in a 5xx or a re-upload, never in a 201 for data that is gone
// (docs/gc-protocol.md, case 12).

// pausedAfter runs first until a call that g accepts has returned, runs
// meanwhile, then lets first go on and returns its result.
func pausedAfter[T any](t *testing.T, g *storagetest.Gate, first func() T, meanwhile func()) T {
	t.Helper()
	testHook.SetAfter(t, g.WaitAfter)
	ch := make(chan T, 1)
	go func() { ch <- first() }()
	select {
	case <-g.Reached:
	case v := <-ch:
		t.Fatalf("the request ended (%v) before a %q call on a path containing %s returned", v, g.Method, g.Substr)
	case <-time.After(30 * time.Second):
		t.Fatalf("no %q call on a path containing %s", g.Method, g.Substr)
	}
	meanwhile()
	g.Release()
	return <-ch
}

// inRequest accepts the calls of requests with method whose URL path
// contains part.
func inRequest(method, part string) func(ctx context.Context) bool {
	return func(ctx context.Context) bool {
		r, _ := ctx.Value("http.request").(*http.Request)
		return r != nil && r.Method == method && strings.Contains(r.URL.Path, part)
	}
}

// reclaim plays the reclaimer on blob: fence it, find no reverse link
// under the fence, delete its directory, release. It reports whether it
// deleted (a reverse link under the fence keeps the blob).
func (a *testApp) reclaim(t *testing.T, blob digest.Digest) bool {
	t.Helper()
	f := a.fence(t, reclaim.Object{Blob: blob})
	defer a.release(t, f)
	links, err := a.env.Links.List(context.Background(), blob)
	if err != nil {
		t.Fatalf("reverse links of %s: %v", blob, err)
	}
	if len(links) > 0 {
		return false
	}
	a.gcDelete(t, layout.BlobDir(blob))
	return true
}

// unlinkAll plays a collect of repo that deletes its links to every digest
// of ds (fence, delete, release each).
func (a *testApp) unlinkAll(t *testing.T, repo string, kind reclaim.LinkKind, ds ...digest.Digest) {
	t.Helper()
	for _, d := range ds {
		f := a.fence(t, reclaim.Object{Blob: d, Repo: repo, Kind: kind})
		dir := layout.LayerLinkDir(repo, d)
		if kind == reclaim.LinkManifest {
			dir = layout.RevisionDir(repo, d)
		}
		a.gcDelete(t, dir)
		a.release(t, f)
	}
}

func forEachWindowCache(t *testing.T, f func(t *testing.T, a *testApp)) {
	storagetest.ForEachBackend(t, func(t *testing.T, b storagetest.Backend) {
		for _, cache := range []string{"", "inmemory", "redis"} {
			if skipCache(b, cache) {
				continue
			}
			t.Run("cache="+cache, func(t *testing.T) { f(t, newWindowApp(t, b, cache)) })
		}
	})
}

// A manifest M, untagged by a tag move and collected (its revision link
// deleted: M's data has no reverse link, waits for the reclaimer, and
// carries a tombstone), is PUT again as r:v2. Distribution stats M's data,
// finds it, skips the write; the PUT stalls right after that Stat while
// the reclaimer deletes M's data; then it writes the revision link. It
// answered 201 for a manifest that then 404'd (issue 24, race 1).
func TestStalledManifestRepushMeetsReclaimer(t *testing.T) {
	forEachWindowCache(t, func(t *testing.T, a *testApp) {
		img := a.pushRandom("r:v1", 1)
		m, _ := imageDigests(t, img)
		a.pushRandom("r:v1", 1) // the tag moves: M is untagged
		a.age(t)
		a.unlinkAll(t, "r", reclaim.LinkManifest, m)

		g := storagetest.NewGate("Stat", "/"+m.Encoded()+"/data")
		g.Match = inRequest(http.MethodPut, "/manifests/")
		reclaimed := false
		code := pausedAfter(t, g, func() int { return a.putManifest("r", "v2", img) }, func() {
			a.age(t) // the PUT stalls for longer than the window
			reclaimed = a.reclaim(t, m)
		})
		if !reclaimed {
			t.Fatal("the reclaimer found a reverse link on M (the interleaving did not happen)")
		}
		if code == http.StatusCreated {
			t.Fatalf("manifest PUT answered 201 although its data was reclaimed before its revision link (GET r:v2: %d)",
				a.do(http.MethodGet, "/v2/r/manifests/v2").StatusCode)
		}
		if code != http.StatusServiceUnavailable {
			t.Fatalf("manifest PUT = %d, want 503", code)
		}
		if code := a.putManifest("r", "v2", img); code != http.StatusCreated {
			t.Fatalf("retry = %d, want 201", code)
		}
		a.pullAll("r:v2")
		requireReverseLinks(t, a)
	})
}

// An upload commit of a blob whose data already exists: Distribution stats
// the data, skips the Move and links it. The repository's link to the blob
// was collected before (so the commit writes no early reverse link: its
// check meets the tombstone), the blob waits for the reclaimer, and the
// commit stalls right after the Stat while the reclaimer deletes it.
func TestStalledCommitMeetsReclaimer(t *testing.T) {
	forEachWindowCache(t, func(t *testing.T, a *testApp) {
		img, err := random.Image(256, 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.push("r:v1", img); err != nil {
			t.Fatal(err)
		}
		m, blobs := imageDigests(t, img)
		layer := blobs[1]
		a.age(t)
		// a collect of r after r:v1 was deleted: every link goes
		if code := a.do(http.MethodDelete, "/v2/r/manifests/"+m.String()).StatusCode; code != http.StatusAccepted {
			t.Fatalf("DELETE = %d", code)
		}
		a.age(t)
		a.unlinkAll(t, "r", reclaim.LinkLayer, blobs...)

		g := storagetest.NewGate("Stat", "/"+layer.Encoded()+"/data")
		g.Match = inRequest(http.MethodPut, "/blobs/uploads/")
		reclaimed := false
		err = pausedAfter(t, g, func() error { return a.push("r:v2", img, noRetry) }, func() {
			a.age(t)
			reclaimed = a.reclaim(t, layer)
		})
		if !reclaimed {
			t.Fatal("the reclaimer found a reverse link on the layer (the interleaving did not happen)")
		}
		if err == nil {
			t.Fatalf("push answered 201 although its layer was reclaimed before its link (HEAD: %d)", a.headBlob("r", layer))
		}
		if statusOf(err) != http.StatusServiceUnavailable {
			t.Fatalf("push: %v, want 503", err)
		}
		if err := a.push("r:v2", img); err != nil {
			t.Fatalf("retry: %v", err)
		}
		a.pullAll("r:v2")
		requireReverseLinks(t, a)
	})
}

// A cross-repository mount stalls right after its first storage call that
// names the blob (the source link or the data Stat, or the reverse link's
// read when the descriptor cache answered) while a collect of the source
// unlinks the blob and the reclaimer deletes it. The mount must answer 503
// or fall back to an upload (202), never 201.
func TestStalledMountMeetsReclaimer(t *testing.T) {
	forEachWindowCache(t, func(t *testing.T, a *testApp) {
		img := a.pushRandom("s:v1", 1)
		m, blobs := imageDigests(t, img)
		layer := blobs[1]
		a.age(t)
		g := storagetest.NewGate("", layer.Encoded())
		g.Match = inRequest(http.MethodPost, "/blobs/uploads/")
		reclaimed := false
		code := pausedAfter(t, g, func() int { return a.mount("t", "s", layer) }, func() {
			a.age(t)
			a.unlinkAll(t, "s", reclaim.LinkManifest, m)
			a.unlinkAll(t, "s", reclaim.LinkLayer, blobs...)
			reclaimed = a.reclaim(t, layer)
		})
		if !reclaimed {
			t.Fatal("the reclaimer found a reverse link on the layer (the interleaving did not happen)")
		}
		switch code {
		case http.StatusCreated:
			t.Fatalf("mount answered 201 although the blob was reclaimed before its link (HEAD: %d)", a.headBlob("t", layer))
		case http.StatusServiceUnavailable, http.StatusAccepted:
		default:
			t.Fatalf("mount = %d, want 503 or 202", code)
		}
		if code := a.headBlob("t", layer); code != http.StatusNotFound {
			t.Fatalf("HEAD of the reclaimed blob in t = %d, want 404", code)
		}
		requireReverseLinks(t, a)
	})
}

// A manifest PUT of M (untagged, still linked) whose revision link write
// lands late: while the write is held, a collect deletes r's revision link
// of M (its forward link, then its reverse link; the look after finds no
// forward link yet) and the reclaimer, finding no reverse link, deletes
// M's data. The write then lands, finds its reverse link gone and puts it
// back: that alone answered 201 for a manifest whose data was gone. It
// must touch again, see the tombstone, find the data gone and withdraw
// the link: 503, and the retry stores M again.
func TestLateLinkWriteMeetsReclaimer(t *testing.T) {
	forEachWindowCache(t, func(t *testing.T, a *testApp) {
		img := a.pushRandom("r:v1", 1)
		m, _ := imageDigests(t, img)
		a.pushRandom("r:v1", 1) // the tag moves: M is untagged

		g := storagetest.NewGate("PutContent", "/_manifests/revisions/sha256/"+m.Encoded()+"/link")
		g.Match = inRequest(http.MethodPut, "/manifests/")
		reclaimed := false
		code := paused(t, g, func() int { return a.putManifest("r", "v2", img) }, func() {
			a.age(t) // the write lands more than a window after the PUT's checks
			a.unlinkAll(t, "r", reclaim.LinkManifest, m)
			reclaimed = a.reclaim(t, m)
		})
		if !reclaimed {
			t.Fatal("the reclaimer found a reverse link on M (the interleaving did not happen)")
		}
		if code == http.StatusCreated {
			t.Fatalf("manifest PUT answered 201 although its data was reclaimed while its revision link was written (GET r:v2: %d)",
				a.do(http.MethodGet, "/v2/r/manifests/v2").StatusCode)
		}
		if code != http.StatusServiceUnavailable {
			t.Fatalf("manifest PUT = %d, want 503", code)
		}
		if _, err := a.env.Raw.Stat(context.Background(), layout.RevisionLinkPath("r", m)); err == nil {
			t.Error("the revision link to the collected data was left behind (linkdb verify: broken_forward)")
		}
		if code := a.putManifest("r", "v2", img); code != http.StatusCreated {
			t.Fatalf("retry = %d, want 201", code)
		}
		a.pullAll("r:v2")
		requireReverseLinks(t, a)
	})
}
