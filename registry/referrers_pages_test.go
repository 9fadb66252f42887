package registry

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
	"github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/reclaim-registry/reclaim/registry/accesscontrol"
	"github.com/reclaim-registry/reclaim/storage/referrers"
)

func TestReferrersPagination(t *testing.T) {
	r := startRegistry(t, nil)
	img := r.pushImage("p", "v1")
	want := map[digest.Digest]bool{}
	for i := range 7 {
		at := sigType
		if i%3 == 0 {
			at = sbomType
		}
		d, _ := r.attach("p", img, at, map[string]string{"i": fmt.Sprint(i)})
		want[d.Digest] = true
	}
	for _, c := range []struct {
		query string
		pages []int
	}{
		{"n=3", []int{3, 3, 1}},
		{"n=7", []int{7}},
		{"n=6&artifactType=" + url.QueryEscape(sigType), []int{4}},
		// Filtered pages are full or last; a last full page may be
		// followed by an empty one.
		{"n=2&artifactType=" + url.QueryEscape(sbomType), []int{2, 1}},
		{"n=0", []int{0}},
	} {
		t.Run(c.query, func(t *testing.T) {
			p := "/v2/p/referrers/" + img.Digest.String() + "?" + c.query
			var sizes []int
			seen := map[digest.Digest]bool{}
			for p != "" && len(sizes) < 10 {
				resp, body := r.do(http.MethodGet, p, nil, nil)
				var idx v1.Index
				if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &idx) != nil {
					t.Fatalf("GET %s: %d %s", p, resp.StatusCode, body)
				}
				sizes = append(sizes, len(idx.Manifests))
				for _, m := range idx.Manifests {
					if !want[m.Digest] || seen[m.Digest] {
						t.Fatalf("%s unknown or listed twice", m.Digest)
					}
					seen[m.Digest] = true
				}
				p = ""
				if link := resp.Header.Get("Link"); link != "" {
					target, ok := strings.CutSuffix(strings.TrimPrefix(link, "<"), `>; rel="next"`)
					if !ok {
						t.Fatalf("Link %q", link)
					}
					p = target
				}
			}
			if fmt.Sprint(sizes) != fmt.Sprint(c.pages) {
				t.Errorf("page sizes %v, want %v", sizes, c.pages)
			}
			if !strings.Contains(c.query, "artifactType") && c.query != "n=0" && len(seen) != len(want) {
				t.Errorf("pages listed %d referrers, want all %d", len(seen), len(want))
			}
		})
	}

}

// Without n, and with n above it, a page is referrersPageSize entries with
// a Link to the next. The index is written directly, in memory: pushing a
// thousand manifests would test nothing more.
func TestReferrersDefaultPageSize(t *testing.T) {
	d := inmemory.New()
	idx := referrers.New(d)
	subject := digest.FromString("s")
	for i := range referrersPageSize + 1 {
		b := fmt.Appendf(nil, "synthetic %d", i)
		if err := idx.Add(t.Context(), "p", subject, v1.Descriptor{MediaType: v1.MediaTypeImageManifest, Digest: digest.FromBytes(b), Size: 1}); err != nil {
			t.Fatal(err)
		}
	}
	h := newReferrersHandler(&configuration.Configuration{}, backendFromDriver(d), &accesscontrol.Control{}, http.NotFoundHandler())
	for _, q := range []string{"", "?n=100000"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v2/p/referrers/"+subject.String()+q, nil))
		var got v1.Index
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
			t.Fatal(err)
		}
		link := rec.Header().Get("Link")
		if len(got.Manifests) != referrersPageSize || !strings.Contains(link, "n=1000") || !strings.Contains(link, "last=") {
			t.Errorf("%q: %d entries, Link %q; want %d and a next link", q, len(got.Manifests), link, referrersPageSize)
		}
	}
}

func TestReferrersPrefix(t *testing.T) {
	r := startRegistry(t, func(c *configuration.Configuration) { c.HTTP.Prefix = "/mirror/" })
	img := r.pushImage("a", "v1")
	for i := range 2 {
		r.attach("a", img, sigType, map[string]string{"i": fmt.Sprint(i)})
	}
	resp, idx := r.referrers("a", img.Digest, "n=1")
	if resp.StatusCode != http.StatusOK || len(idx.Manifests) != 1 || !strings.HasPrefix(resp.Header.Get("Link"), "</mirror/v2/a/referrers/") {
		t.Errorf("behind prefix: %d %+v Link %q", resp.StatusCode, idx.Manifests, resp.Header.Get("Link"))
	}
}
