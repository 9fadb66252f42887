package middleware

import (
	"context"
	"net/http"
	"sort"
	"testing"

	diststorage "github.com/distribution/distribution/v3/registry/storage"
	"github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

// TestLinkDatabaseEndToEnd pushes with a real client (shared layers across
// repositories, a mount, an index, a tag move, deletes, a repository
// removal) and then walks the filesystem: every forward link must have its
// reverse link and every reverse link its forward link; Distribution's
// catalog, tag listing and blob enumeration must not notice our files.
func TestLinkDatabaseEndToEnd(t *testing.T) {
	storagetest.ForEachBackend(t, func(t *testing.T, b storagetest.Backend) {
		for _, cache := range []string{"", "inmemory"} {
			t.Run("cache="+cache, func(t *testing.T) {
				a := newTestApp(t, appOptions{cache: cache, redisAddr: b.Addr, prefix: b.Prefix})
				shared := pushAndChange(t, a)
				if n := checkLinkDB(t, a.env.Raw); n == 0 {
					t.Fatal("no forward links found: the walk is broken")
				}
				checkSharedLayer(t, a, shared)
				// A whole repository removed the way Distribution's vacuum does.
				ctx := context.Background()
				for _, sub := range []string{"_manifests", "_layers", "_uploads"} {
					_ = a.env.Driver.Delete(ctx, layout.RepositoryPath("a/one")+"/"+sub)
				}
				checkLinkDB(t, a.env.Raw)
				if links, _ := a.env.Links.List(ctx, shared); len(links) != 1 || links[0].Repo != "b" {
					t.Fatalf("after repository delete: %v", links)
				}
				checkDistributionUnaware(t, a)
			})
		}
	})
}

// pushAndChange pushes two images into a/one, the first also into b, and an
// index into c; mounts a layer into d, moves a tag, deletes b's manifest
// and d's layer link through the API, and pulls what is left of a/one. It
// returns a layer a/one and b share.
func pushAndChange(t *testing.T, a *testApp) (shared digest.Digest) {
	t.Helper()
	img1, _ := random.Image(512, 3)
	img2, _ := random.Image(512, 2)
	idx, _ := random.Index(256, 1, 2)
	for _, step := range []struct {
		ref string
		do  func(string) error
	}{
		{"a/one:v1", func(r string) error { return a.push(r, img1) }},
		{"b:v1", func(r string) error { return a.push(r, img1) }}, // same blobs, second repo
		{"a/one:v2", func(r string) error { return a.push(r, img2) }},
		{"c:idx", func(r string) error { return remote.WriteIndex(a.ref(r), idx) }},
	} {
		if err := step.do(step.ref); err != nil {
			t.Fatalf("push %s: %v", step.ref, err)
		}
	}
	_, blobs2 := imageDigests(t, img2)
	if code := a.mount("d", "a/one", blobs2[1]); code != http.StatusCreated {
		t.Fatalf("mount = %d, want 201", code)
	}
	// Tag move: v1 now points at img2.
	if err := remote.Tag(a.ref("a/one:v2").Context().Tag("v1"), img2); err != nil {
		t.Fatal(err)
	}
	// Deletes through the API: a manifest and a layer link.
	m1, blobs1 := imageDigests(t, img1)
	if err := remote.Delete(a.ref("b@" + m1.String())); err != nil {
		t.Fatal(err)
	}
	if code := a.do(http.MethodDelete, "/v2/d/blobs/"+blobs2[1].String()).StatusCode; code != http.StatusAccepted {
		t.Fatalf("delete blob = %d", code)
	}
	a.pullAll("a/one:v1")
	a.pullAll("a/one:v2")
	return blobs1[1]
}

// checkSharedLayer: the layer's reverse links name both repositories.
func checkSharedLayer(t *testing.T, a *testApp, shared digest.Digest) {
	t.Helper()
	links, err := a.env.Links.List(context.Background(), shared)
	if err != nil {
		t.Fatal(err)
	}
	got := []string{}
	for _, l := range links {
		got = append(got, l.Repo+" "+string(l.Kind))
	}
	sort.Strings(got)
	if len(got) != 2 || got[0] != "a/one _layers" || got[1] != "b _layers" {
		t.Fatalf("reverse links of a shared layer = %v", got)
	}
}

// checkDistributionUnaware: catalog, tags and blob enumeration see none of
// the link database's files.
func checkDistributionUnaware(t *testing.T, a *testApp) {
	t.Helper()
	repos, err := remote.CatalogPage(a.ref("b:v1").Context().Registry, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(repos)
	// d holds only a layer link: upstream lists repositories with manifests.
	if want := []string{"b", "c"}; len(repos) != 2 || repos[0] != want[0] || repos[1] != want[1] {
		t.Fatalf("catalog = %v, want %v", repos, want)
	}
	tags, err := remote.List(a.ref("c:idx").Context())
	if err != nil || len(tags) != 1 || tags[0] != "idx" {
		t.Fatalf("tags = %v %v", tags, err)
	}
	assertEnumerationClean(t, a)
}

// assertEnumerationClean runs Distribution's own blob enumeration (the one
// upstream GC uses) and checks it yields only digests whose data exists.
func assertEnumerationClean(t *testing.T, a *testApp) {
	t.Helper()
	ctx := context.Background()
	d, err := filesystem.FromParameters(map[string]any{"rootdirectory": a.root})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := diststorage.NewRegistry(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	err = reg.Blobs().Enumerate(ctx, func(dg digest.Digest) error {
		n++
		if _, err := d.Stat(ctx, layout.BlobDataPath(dg)); err != nil {
			t.Errorf("enumerated %s without data: %v", dg, err)
		}
		return nil
	})
	if err != nil || n == 0 {
		t.Fatalf("enumerate: %d blobs, %v", n, err)
	}
}
