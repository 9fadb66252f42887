package layout

import (
	"fmt"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/reclaim"
)

const hexA = "a3ed95caeb02ffe68cdd9fd84406680ae93d633cb16422d00e8a7c22955b46d4"

var dA = digest.Digest("sha256:" + hexA)

// TestClassifyDistributionLayout pins Classify to the exact strings
// Distribution's own pathFor produces (copied from its paths_test.go layout).
func TestClassifyDistributionLayout(t *testing.T) {
	for _, tc := range []struct {
		path string
		want Path
	}{
		{"/docker/registry/v2/blobs/sha256/a3/" + hexA + "/data", Path{Kind: PathBlobData, Digest: dA}},
		{"/docker/registry/v2/blobs/sha256/a3/" + hexA, Path{Kind: PathBlobDir, Digest: dA}},
		{"/docker/registry/v2/repositories/foo/bar/_layers/sha256/" + hexA + "/link", Path{Kind: PathLayerLink, Repo: "foo/bar", Digest: dA}},
		{"/docker/registry/v2/repositories/foo/bar/_layers/sha256/" + hexA, Path{Kind: PathLayerLinkDir, Repo: "foo/bar", Digest: dA}},
		{"/docker/registry/v2/repositories/foo/bar/_manifests/revisions/sha256/" + hexA + "/link", Path{Kind: PathRevisionLink, Repo: "foo/bar", Digest: dA}},
		{"/docker/registry/v2/repositories/foo/bar/_manifests/revisions/sha256/" + hexA, Path{Kind: PathRevisionLinkDir, Repo: "foo/bar", Digest: dA}},
		{"/docker/registry/v2/repositories/foo/bar/_manifests/tags/thetag/current/link", Path{Kind: PathTagCurrent, Repo: "foo/bar", Tag: "thetag"}},
		{"/docker/registry/v2/repositories/foo/bar/_manifests/tags/thetag/index/sha256/" + hexA + "/link", Path{Kind: PathTagIndex, Repo: "foo/bar", Tag: "thetag", Digest: dA}},
		{"/docker/registry/v2/repositories/foo/bar/_manifests/tags/thetag", Path{Kind: PathTagDir, Repo: "foo/bar", Tag: "thetag"}},
		{"/docker/registry/v2/repositories/foo/bar/_uploads/asdf-asdf-asdf-adsf/data", Path{Kind: PathUpload, Repo: "foo/bar"}},
		{"/docker/registry/v2/repositories/foo/bar/_uploads/asdf-asdf-asdf-adsf/startedat", Path{Kind: PathUpload, Repo: "foo/bar"}},
		{"/docker/registry/v2/repositories/foo/bar", Path{Kind: PathRepositoryDir, Repo: "foo/bar"}},
		{"/docker/registry/v2/repositories/foo/bar/_layers", Path{Kind: PathRepositoryDir, Repo: "foo/bar", Sub: "_layers"}},
		{"/docker/registry/v2/repositories/foo/bar/_manifests", Path{Kind: PathRepositoryDir, Repo: "foo/bar", Sub: "_manifests"}},
		{"/docker/registry/v2/repositories/foo/bar/_manifests/revisions", Path{Kind: PathRepositoryDir, Repo: "foo/bar", Sub: "_manifests/revisions"}},
		{"/docker/registry/v2/blobs/sha256/a3/" + hexA + "/_repositories/foo/bar/_layers/link", Path{Kind: PathReverseLink, Repo: "foo/bar", Digest: dA, LinkKind: reclaim.LinkLayer}},
		{"/docker/registry/v2/blobs/sha256/a3/" + hexA + "/_repositories/x/_manifests/link", Path{Kind: PathReverseLink, Repo: "x", Digest: dA, LinkKind: reclaim.LinkManifest}},
		{"/docker/registry/v2/repositories/r/_manifests/referrers/sha256/" + hexA + "/sha256/" + hexA + "/link", Path{Kind: PathReferrerLink, Repo: "r", Digest: dA, Referrer: dA}},
		// Not ours to interpret: malformed or foreign paths are PathOther.
		{"/docker/registry/v2/blobs/sha256/ff/" + hexA + "/data", Path{}},
		{"/docker/registry/v2/blobs/sha256/a3/" + hexA[:10] + "/data", Path{}},
		{"/docker/registry/v2/blobs/sha256/a3/" + hexA + "/_repositories/Foo/_layers/link", Path{}},
		{"/docker/registry/v2/blobs/sha256/a3/" + hexA + "/_repositories/foo/_other/link", Path{}},
		{"/docker/registry/v2/repositories/foo/_layers/sha256/" + strings.ToUpper(hexA) + "/link", Path{}},
		{"/docker/registry/v2/repositories/_layers/sha256/" + hexA + "/link", Path{}},
		{"/docker/registry/v2/repositories", Path{}},
		{"/reclaim/linkdb-complete", Path{}},
		{"", Path{}},
	} {
		got := Classify(tc.path)
		if got != tc.want {
			t.Errorf("Classify(%q) = %+v, want %+v", tc.path, got, tc.want)
		}
	}
}

func TestBuildersRoundTrip(t *testing.T) {
	repo := "library/ubuntu"
	for _, p := range []string{
		BlobDataPath(dA), BlobDir(dA), LayerLinkPath(repo, dA), RevisionLinkPath(repo, dA),
		ReverseLinkPath(dA, repo, reclaim.LinkLayer), ReverseLinkPath(dA, repo, reclaim.LinkManifest),
		TagCurrentPath(repo, "v1"), TagIndexPath(repo, "v1", dA), ReferrerLinkPath(repo, dA, dA),
	} {
		c := Classify(p)
		if c.Kind == PathOther {
			t.Fatalf("Classify(%q) = other", p)
		}
		if c.String() != p {
			t.Errorf("Classify(%q).String() = %q", p, c.String())
		}
	}
}

// FuzzClassify: Classify never panics, and whatever it recognises rebuilds
// to the same string (so acting on a classification acts on that path).
func FuzzClassify(f *testing.F) {
	for _, s := range []string{
		BlobDataPath(dA), BlobDir(dA), LayerLinkPath("a/b", dA), RevisionLinkPath("a", dA),
		ReverseLinkPath(dA, "a/b/c", reclaim.LinkLayer), TagCurrentPath("a", "latest"), TagIndexPath("a", "t", dA),
		ReferrerLinkPath("a", dA, dA), RepositoryPath("a/b") + "/_manifests/revisions",
		"/docker/registry/v2/repositories/a/_uploads/x/data", "/docker/registry/v2/blobs/sha256/a3//data",
		"/docker/registry/v2/repositories//_layers", "/docker/registry/v2/blobs/x",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		c := Classify(p)
		switch c.Kind {
		case PathOther, PathUpload, PathTagDir:
			return
		}
		if c.String() != p {
			t.Fatalf("Classify(%q) = %+v rebuilds to %q", p, c, c.String())
		}
		if c.Kind != PathBlobData && c.Kind != PathBlobDir && !ValidRepo(c.Repo) {
			t.Fatalf("Classify(%q) accepted invalid repo %q", p, c.Repo)
		}
	})
}

// FuzzBuildersClassify: paths built from any valid repository name and digest
// classify back to those values.
func FuzzBuildersClassify(f *testing.F) {
	f.Add("library/ubuntu", hexA)
	f.Add("a", "00"+hexA[2:])
	f.Add("localhost:5000/x/y", hexA)
	f.Fuzz(func(t *testing.T, repo, hex string) {
		d := digest.NewDigestFromEncoded(digest.SHA256, hex)
		if d.Validate() != nil || !ValidRepo(repo) {
			return
		}
		for _, tc := range []struct {
			p    string
			kind PathKind
		}{
			{LayerLinkPath(repo, d), PathLayerLink},
			{RevisionLinkPath(repo, d), PathRevisionLink},
			{ReverseLinkPath(d, repo, reclaim.LinkLayer), PathReverseLink},
			{ReverseLinkPath(d, repo, reclaim.LinkManifest), PathReverseLink},
		} {
			c := Classify(tc.p)
			if c.Kind != tc.kind || c.Repo != repo || c.Digest != d {
				t.Fatalf("Classify(%q) = %+v", tc.p, c)
			}
		}
	})
}

// FuzzValidDigest: the sha256 fast path of ValidDigest and parseDigest
// accepts exactly what go-digest's Validate accepts.
func FuzzValidDigest(f *testing.F) {
	for _, s := range []string{string(dA), "sha256:" + strings.ToUpper(hexA), "sha256:" + hexA[:63], "sha256:" + hexA + "0", "sha256:", "sha512:" + hexA + hexA, "sha256:" + hexA[:63] + "g", ":" + hexA, "sha256" + hexA} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d := digest.Digest(s)
		want := d.Validate() == nil
		if got := ValidDigest(d); got != want {
			t.Fatalf("ValidDigest(%q) = %v, Validate says %v", s, got, want)
		}
		if alg, enc, ok := strings.Cut(s, ":"); ok {
			got, ok := parseDigest(alg, enc)
			if ok != want || (ok && got != d) {
				t.Fatalf("parseDigest(%q, %q) = %q %v, Validate says %v", alg, enc, got, ok, want)
			}
		}
	})
}

// TestValidRepoCache: a remembered name answers as the grammar does, an
// invalid one is never remembered, and the cache stays bounded.
func TestValidRepoCache(t *testing.T) {
	for range 2 { // the second round answers from the cache
		for name, want := range map[string]bool{"library/ubuntu": true, "a": true, "Upper": false, "a//b": false, "_x": false, strings.Repeat("a", 256): false} {
			if got := ValidRepo(name); got != want {
				t.Errorf("ValidRepo(%q) = %v, want %v", name, got, want)
			}
		}
	}
	if _, ok := validRepos.Load("Upper"); ok {
		t.Errorf("an invalid name was remembered")
	}
	for i := range 3 * validRepoCacheMax {
		if !ValidRepo(fmt.Sprintf("r%d", i)) {
			t.Fatalf("r%d refused", i)
		}
	}
	n := 0
	validRepos.Range(func(any, any) bool { n++; return true })
	if n > validRepoCacheMax {
		t.Errorf("%d names remembered, want at most %d", n, validRepoCacheMax)
	}
}

// BenchmarkClassify: the paths of one pull (a revision link, a layer link,
// blob data), as the middleware classifies every driver call.
//
//	go test -run '^$' -bench Classify ./storage/layout
func BenchmarkClassify(b *testing.B) {
	paths := []string{RevisionLinkPath("library/ubuntu", dA), LayerLinkPath("library/ubuntu", dA), BlobDataPath(dA)}
	for i := range b.N {
		if Classify(paths[i%len(paths)]).Kind == PathOther {
			b.Fatal("other")
		}
	}
}

// A trash hold classifies as one only with a well-formed entry id; any
// other entry under _trash is PathOther, never a reverse link.
func TestClassifyTrashHold(t *testing.T) {
	d := digest.FromString("blob")
	for _, tc := range []struct {
		p    string
		kind PathKind
	}{
		{TrashHoldPath(d, "1796575280053-111a5048"), PathTrashHold},
		{TrashHoldPath(d, "1796575280053-111A5048"), PathOther},
		{TrashHoldPath(d, "x-111a5048"), PathOther},
		{TrashHoldPath(d, "1796575280053"), PathOther},
		{TrashDir(d) + "/link", PathOther},
		{TrashDir(d) + "/1796575280053-111a5048/extra/link", PathOther},
	} {
		if got := Classify(tc.p).Kind; got != tc.kind {
			t.Errorf("%s: %v, want %v", tc.p, got, tc.kind)
		}
	}
}
