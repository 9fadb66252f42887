package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/distribution/distribution/v3/configuration"
	_ "github.com/distribution/distribution/v3/registry/auth/htpasswd"
	"github.com/distribution/distribution/v3/registry/handlers"
	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
	"github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/referrers"
	"github.com/sirupsen/logrus"
	"golang.org/x/crypto/bcrypt"
)

// testRegistry is Distribution's app wrapped by Reclaim, in process, over
// filesystem storage in a temp dir.
type testRegistry struct {
	t        *testing.T
	url      string
	root     string
	user     string
	password string
}

func startRegistry(t *testing.T, edit func(*configuration.Configuration)) *testRegistry {
	t.Helper()
	logrus.SetLevel(logrus.FatalLevel) // Distribution logs every 4xx a test provokes
	root := t.TempDir()
	cfg := &configuration.Configuration{Version: configuration.MajorMinorVersion(0, 1)}
	cfg.Log.AccessLog.Disabled = true
	cfg.Storage = configuration.Storage{
		"filesystem": configuration.Parameters{"rootdirectory": root},
		"delete":     configuration.Parameters{"enabled": true},
	}
	cfg.HTTP.Secret = "referrers-test"
	// The collectors are process-wide; a second app would register them twice.
	cfg.HTTP.Debug.Prometheus.Enabled = false
	cfg.Validation.Manifests.URLs.Allow = []string{"^https?://"}
	if edit != nil {
		edit(cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	app := handlers.NewApp(ctx, cfg)
	srv := httptest.NewServer(s.Handler(app))
	t.Cleanup(func() {
		srv.Close()
		_ = app.Shutdown()
		s.Close()
		cancel()
	})
	return &testRegistry{t: t, url: srv.URL + strings.TrimSuffix(cfg.HTTP.Prefix, "/"), root: root}
}

func withHtpasswd(t *testing.T, user, password string) func(*configuration.Configuration) {
	h, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "htpasswd")
	if err := os.WriteFile(p, fmt.Appendf(nil, "%s:%s\n", user, h), 0o600); err != nil {
		t.Fatal(err)
	}
	return func(c *configuration.Configuration) {
		c.Auth = configuration.Auth{"htpasswd": configuration.Parameters{"realm": "test", "path": p}}
	}
}

func (r *testRegistry) do(method, path string, header http.Header, body []byte) (*http.Response, []byte) {
	r.t.Helper()
	req, err := http.NewRequestWithContext(r.t.Context(), method, r.url+path, bytes.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if r.user != "" {
		req.SetBasicAuth(r.user, r.password)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		r.t.Fatal(err)
	}
	return resp, b
}

// pushBlob uploads b to repo: POST for a session, then one PUT.
func (r *testRegistry) pushBlob(repo string, b []byte, mediaType string) v1.Descriptor {
	r.t.Helper()
	d := digest.FromBytes(b)
	resp, body := r.do(http.MethodPost, "/v2/"+repo+"/blobs/uploads/", nil, nil)
	if resp.StatusCode != http.StatusAccepted {
		r.t.Fatalf("start upload: %d %s", resp.StatusCode, body)
	}
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil {
		r.t.Fatal(err)
	}
	q := loc.Query()
	q.Set("digest", d.String())
	loc.RawQuery = q.Encode()
	base, _ := url.Parse(r.url)
	target := base.ResolveReference(loc)
	target.Path = strings.TrimPrefix(target.Path, base.Path)
	resp, body = r.do(http.MethodPut, target.RequestURI(), http.Header{"Content-Type": {"application/octet-stream"}}, b)
	if resp.StatusCode != http.StatusCreated {
		r.t.Fatalf("push blob: %d %s", resp.StatusCode, body)
	}
	return v1.Descriptor{MediaType: mediaType, Digest: d, Size: int64(len(b))}
}

// putManifest PUTs m (marshalled) as ref and fails unless Distribution
// stores it. It returns the manifest's descriptor and the response.
func (r *testRegistry) putManifest(repo, ref string, m any) (v1.Descriptor, *http.Response) {
	r.t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		r.t.Fatal(err)
	}
	var head struct {
		MediaType string `json:"mediaType"`
	}
	_ = json.Unmarshal(b, &head)
	d := v1.Descriptor{MediaType: head.MediaType, Digest: digest.FromBytes(b), Size: int64(len(b))}
	if ref == "" {
		ref = d.Digest.String()
	}
	resp, body := r.do(http.MethodPut, "/v2/"+repo+"/manifests/"+ref, http.Header{"Content-Type": {head.MediaType}}, b)
	if resp.StatusCode != http.StatusCreated {
		r.t.Fatalf("put manifest %s: %d %s", ref, resp.StatusCode, body)
	}
	return d, resp
}

// referrers GETs the referrers of subject with the raw query q.
func (r *testRegistry) referrers(repo string, subject digest.Digest, q string) (*http.Response, v1.Index) {
	r.t.Helper()
	p := "/v2/" + repo + "/referrers/" + subject.String()
	if q != "" {
		p += "?" + q
	}
	resp, body := r.do(http.MethodGet, p, nil, nil)
	var idx v1.Index
	if resp.StatusCode == http.StatusOK {
		if ct := resp.Header.Get("Content-Type"); ct != v1.MediaTypeImageIndex {
			r.t.Errorf("Content-Type = %q, want %q", ct, v1.MediaTypeImageIndex)
		}
		if err := json.Unmarshal(body, &idx); err != nil {
			r.t.Fatalf("referrers body %s: %v", body, err)
		}
		if idx.SchemaVersion != 2 || idx.MediaType != v1.MediaTypeImageIndex || idx.Manifests == nil {
			r.t.Errorf("referrers body %s: want an OCI index with a manifests array", body)
		}
	}
	return resp, idx
}

// pushImage pushes a small OCI image to repo:tag and returns its descriptor.
func (r *testRegistry) pushImage(repo, tag string) v1.Descriptor {
	r.t.Helper()
	cfg := r.pushBlob(repo, []byte(`{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}`), v1.MediaTypeImageConfig)
	layer := r.pushBlob(repo, []byte("layer of "+repo+":"+tag), v1.MediaTypeImageLayer)
	d, _ := r.putManifest(repo, tag, v1.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: v1.MediaTypeImageManifest,
		Config:    cfg,
		Layers:    []v1.Descriptor{layer},
	})
	return d
}

const (
	sigType  = "application/vnd.example.signature.v1"
	sbomType = "application/vnd.example.sbom.v1+json"
)

// attach pushes an artifact the way `oras attach` does: an image manifest
// with artifactType, the empty config, one blob and the subject, by digest.
func (r *testRegistry) attach(repo string, subject v1.Descriptor, artifactType string, annotations map[string]string) (v1.Descriptor, *http.Response) {
	r.t.Helper()
	empty := r.pushBlob(repo, []byte("{}"), v1.MediaTypeEmptyJSON)
	blob := r.pushBlob(repo, []byte(artifactType+fmt.Sprint(annotations)), "application/octet-stream")
	subject = v1.Descriptor{MediaType: subject.MediaType, Digest: subject.Digest, Size: subject.Size}
	d, resp := r.putManifest(repo, "", v1.Manifest{
		Versioned:    specs.Versioned{SchemaVersion: 2},
		MediaType:    v1.MediaTypeImageManifest,
		ArtifactType: artifactType,
		Config:       empty,
		Layers:       []v1.Descriptor{blob},
		Subject:      &subject,
		Annotations:  annotations,
	})
	d.ArtifactType, d.Annotations = artifactType, annotations
	return d, resp
}

func findDesc(idx v1.Index, d digest.Digest) *v1.Descriptor {
	for i := range idx.Manifests {
		if idx.Manifests[i].Digest == d {
			return &idx.Manifests[i]
		}
	}
	return nil
}

func TestReferrersAPI(t *testing.T) {
	r := startRegistry(t, nil)
	const repo = "team/app"
	img := r.pushImage(repo, "v1")

	// oras attach: artifactType on the manifest, annotations.
	sig, resp := r.attach(repo, img, sigType, map[string]string{"org.opencontainers.image.created": "2026-01-01T00:00:00Z"})
	if got := resp.Header.Get("OCI-Subject"); got != img.Digest.String() {
		t.Errorf("OCI-Subject = %q, want %q", got, img.Digest)
	}

	// regctl artifact put --subject (1.0 style): no artifactType, the
	// artifact type is the config's media type; pushed by tag.
	cfg := r.pushBlob(repo, []byte(`{"sbom":true}`), sbomType)
	layer := r.pushBlob(repo, []byte("sbom body"), "application/spdx+json")
	subj := v1.Descriptor{MediaType: img.MediaType, Digest: img.Digest, Size: img.Size}
	sbom, resp := r.putManifest(repo, "sbom", v1.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: v1.MediaTypeImageManifest,
		Config:    cfg,
		Layers:    []v1.Descriptor{layer},
		Subject:   &subj,
	})
	if got := resp.Header.Get("OCI-Subject"); got != img.Digest.String() {
		t.Errorf("regctl-style push: OCI-Subject = %q, want %q", got, img.Digest)
	}

	// An index with a subject: artifactType only if the index has one.
	list, resp := r.putManifest(repo, "", v1.Index{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: v1.MediaTypeImageIndex,
		Manifests: []v1.Descriptor{sig},
		Subject:   &subj,
	})
	if got := resp.Header.Get("OCI-Subject"); got != img.Digest.String() {
		t.Errorf("index push: OCI-Subject = %q, want %q", got, img.Digest)
	}

	// A manifest without a subject gets no OCI-Subject.
	other := r.pushImage(repo, "v2")
	if _, resp := r.putManifest(repo, "v2", v1.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: v1.MediaTypeImageManifest,
		Config: cfg, Layers: []v1.Descriptor{layer},
	}); resp.Header.Get("OCI-Subject") != "" {
		t.Error("OCI-Subject on a manifest without subject")
	}

	resp, idx := r.referrers(repo, img.Digest, "")
	if resp.StatusCode != http.StatusOK || len(idx.Manifests) != 3 {
		t.Fatalf("referrers: %d, %d entries (%+v); want 200 with 3", resp.StatusCode, len(idx.Manifests), idx.Manifests)
	}
	if resp.Header.Get("OCI-Filters-Applied") != "" || resp.Header.Get("Link") != "" {
		t.Errorf("unfiltered single page: headers %v", resp.Header)
	}
	for _, want := range []v1.Descriptor{
		{MediaType: v1.MediaTypeImageManifest, Digest: sig.Digest, Size: sig.Size, ArtifactType: sigType, Annotations: sig.Annotations},
		{MediaType: v1.MediaTypeImageManifest, Digest: sbom.Digest, Size: sbom.Size, ArtifactType: sbomType},
		{MediaType: v1.MediaTypeImageIndex, Digest: list.Digest, Size: list.Size},
	} {
		got := findDesc(idx, want.Digest)
		if got == nil {
			t.Errorf("referrer %s missing", want.Digest)
			continue
		}
		if got.MediaType != want.MediaType || got.Size != want.Size || got.ArtifactType != want.ArtifactType ||
			fmt.Sprint(got.Annotations) != fmt.Sprint(want.Annotations) {
			t.Errorf("referrer = %+v, want %+v", *got, want)
		}
	}

	// artifactType filter.
	resp, idx = r.referrers(repo, img.Digest, "artifactType="+url.QueryEscape(sbomType))
	if resp.Header.Get("OCI-Filters-Applied") != "artifactType" {
		t.Errorf("OCI-Filters-Applied = %q", resp.Header.Get("OCI-Filters-Applied"))
	}
	if len(idx.Manifests) != 1 || idx.Manifests[0].Digest != sbom.Digest {
		t.Errorf("filtered by %s: %+v", sbomType, idx.Manifests)
	}
	if _, idx = r.referrers(repo, img.Digest, "artifactType=none"); len(idx.Manifests) != 0 {
		t.Errorf("filter matching nothing: %+v", idx.Manifests)
	}

	// Empty index, not 404: a digest nobody refers to, a missing repository.
	for _, c := range []struct{ repo, subject string }{{repo, other.Digest.String()}, {"no/such/repo", img.Digest.String()}} {
		resp, idx := r.referrers(c.repo, digest.Digest(c.subject), "")
		if resp.StatusCode != http.StatusOK || len(idx.Manifests) != 0 {
			t.Errorf("%s %s: %d %+v, want 200 and an empty index", c.repo, c.subject, resp.StatusCode, idx.Manifests)
		}
	}

	// Deleting a tag deletes no manifest: the sbom stays a referrer.
	if resp, body := r.do(http.MethodDelete, "/v2/"+repo+"/manifests/sbom", nil, nil); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("delete tag: %d %s", resp.StatusCode, body)
	}
	if _, idx = r.referrers(repo, img.Digest, ""); findDesc(idx, sbom.Digest) == nil {
		t.Error("tag delete removed the referrer")
	}
	// Deleting the manifest by digest removes it from the index.
	if resp, body := r.do(http.MethodDelete, "/v2/"+repo+"/manifests/"+sig.Digest.String(), nil, nil); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("delete manifest: %d %s", resp.StatusCode, body)
	}
	_, idx = r.referrers(repo, img.Digest, "")
	if findDesc(idx, sig.Digest) != nil || len(idx.Manifests) != 2 {
		t.Errorf("after deleting %s: %+v", sig.Digest, idx.Manifests)
	}
	// A failed delete (404: already gone) changes nothing.
	if resp, _ := r.do(http.MethodDelete, "/v2/"+repo+"/manifests/"+sig.Digest.String(), nil, nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("second delete: %d, want 404", resp.StatusCode)
	}
	// Pushing it again brings it back.
	r.attach(repo, img, sigType, sig.Annotations)
	if _, idx = r.referrers(repo, img.Digest, ""); len(idx.Manifests) != 3 {
		t.Errorf("after re-push: %d entries, want 3", len(idx.Manifests))
	}

	// HEAD answers the headers only.
	if resp, body := r.do(http.MethodHead, "/v2/"+repo+"/referrers/"+img.Digest.String(), nil, nil); resp.StatusCode != http.StatusOK || len(body) != 0 ||
		resp.Header.Get("Content-Type") != v1.MediaTypeImageIndex {
		t.Errorf("HEAD: %d %q %v", resp.StatusCode, body, resp.Header)
	}
}

// A subject that was never pushed (the conformance suite's missing-subject
// case) is still indexed: the referrer may come first.
func TestReferrersMissingSubject(t *testing.T) {
	r := startRegistry(t, nil)
	ghost := v1.Descriptor{MediaType: v1.MediaTypeImageManifest, Digest: digest.FromString("not pushed"), Size: 10}
	sig, resp := r.attach("a", ghost, sigType, nil)
	if resp.Header.Get("OCI-Subject") != ghost.Digest.String() {
		t.Errorf("OCI-Subject = %q", resp.Header.Get("OCI-Subject"))
	}
	if _, idx := r.referrers("a", ghost.Digest, ""); len(idx.Manifests) != 1 || idx.Manifests[0].Digest != sig.Digest {
		t.Errorf("referrers of a missing subject: %+v", idx.Manifests)
	}
}

func TestReferrersBadRequests(t *testing.T) {
	r := startRegistry(t, nil)
	good := digest.FromString("x").String()
	for _, c := range []struct {
		method, path string
		status       int
		code         string
	}{
		{http.MethodGet, "/v2/a/referrers/sha256:nothex", http.StatusBadRequest, "DIGEST_INVALID"},
		{http.MethodGet, "/v2/a/referrers/latest", http.StatusBadRequest, "DIGEST_INVALID"},
		{http.MethodGet, "/v2/a/referrers/", http.StatusBadRequest, "DIGEST_INVALID"},
		{http.MethodGet, "/v2/Upper/referrers/" + good, http.StatusBadRequest, "NAME_INVALID"},
		{http.MethodGet, "/v2/a//b/referrers/" + good, http.StatusBadRequest, "NAME_INVALID"},
		{http.MethodGet, "/v2/a/referrers/" + good + "?n=-1", http.StatusBadRequest, "PAGINATION_NUMBER_INVALID"},
		{http.MethodGet, "/v2/a/referrers/" + good + "?n=x", http.StatusBadRequest, "PAGINATION_NUMBER_INVALID"},
		{http.MethodGet, "/v2/a/referrers/" + good + "?last=x", http.StatusBadRequest, "DIGEST_INVALID"},
		{http.MethodPut, "/v2/a/referrers/" + good, http.StatusMethodNotAllowed, "UNSUPPORTED"},
	} {
		resp, body := r.do(c.method, c.path, nil, nil)
		var e struct{ Errors []struct{ Code string } }
		_ = json.Unmarshal(body, &e)
		if resp.StatusCode != c.status || len(e.Errors) != 1 || e.Errors[0].Code != c.code {
			t.Errorf("%s %s: %d %s, want %d %s", c.method, c.path, resp.StatusCode, body, c.status, c.code)
		}
	}
	// Repositories named like our route are Distribution's, not ours.
	resp, _ := r.do(http.MethodGet, "/v2/a/referrers/tags/list", nil, nil)
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("tags of repository a/referrers: %d, want Distribution's 404 NAME_UNKNOWN", resp.StatusCode)
	}
}

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
	h := newReferrersHandler(&configuration.Configuration{}, backendFromDriver(d), &accessControl{}, http.NotFoundHandler())
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

func TestReferrersAuth(t *testing.T) {
	r := startRegistry(t, withHtpasswd(t, "alice", "secret"))
	good := digest.FromString("x")

	resp, body := r.do(http.MethodGet, "/v2/a/referrers/"+good.String(), nil, nil)
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(resp.Header.Get("WWW-Authenticate"), `realm="test"`) ||
		!strings.Contains(string(body), "UNAUTHORIZED") {
		t.Errorf("anonymous: %d %v %s; want 401 with a Basic challenge", resp.StatusCode, resp.Header, body)
	}
	// Nothing is validated before authorization.
	if resp, _ := r.do(http.MethodGet, "/v2/a/referrers/bad", nil, nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("anonymous, bad digest: %d, want 401", resp.StatusCode)
	}
	r.user, r.password = "alice", "wrong"
	if resp, _ := r.do(http.MethodGet, "/v2/a/referrers/"+good.String(), nil, nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("wrong password: %d, want 401", resp.StatusCode)
	}
	r.user, r.password = "alice", "secret"
	img := r.pushImage("a", "v1")
	sig, resp := r.attach("a", img, sigType, nil)
	if resp.Header.Get("OCI-Subject") != img.Digest.String() {
		t.Errorf("authorized push: OCI-Subject %q", resp.Header.Get("OCI-Subject"))
	}
	if resp, idx := r.referrers("a", img.Digest, ""); resp.StatusCode != http.StatusOK || findDesc(idx, sig.Digest) == nil {
		t.Errorf("authorized: %d %+v", resp.StatusCode, idx.Manifests)
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

// failingDriver fails every write to the referrers index.
type failingDriver struct{ storagedriver.StorageDriver }

var errInjected = errors.New("injected storage failure")

func (f failingDriver) PutContent(ctx context.Context, p string, b []byte) error {
	if layout.Classify(p).Kind == layout.KindReferrerLink {
		return errInjected
	}
	return f.StorageDriver.PutContent(ctx, p, b)
}

// If the index cannot be written, the push still succeeds (the manifest is
// stored) but without OCI-Subject, so the client uses the tag fallback.
func TestReferrersIndexWriteFails(t *testing.T) {
	orig := openDriver
	t.Cleanup(func() { openDriver = orig })
	openDriver = func(ctx context.Context, c *configuration.Configuration) (storagedriver.StorageDriver, error) {
		d, err := orig(ctx, c)
		return failingDriver{d}, err
	}
	r := startRegistry(t, nil)
	img := r.pushImage("a", "v1")
	sig, resp := r.attach("a", img, sigType, nil)
	if got := resp.Header.Get("OCI-Subject"); got != "" {
		t.Errorf("OCI-Subject = %q after a failed index write, want none", got)
	}
	if resp, _ := r.do(http.MethodGet, "/v2/a/manifests/"+sig.Digest.String(), http.Header{"Accept": {v1.MediaTypeImageManifest}}, nil); resp.StatusCode != http.StatusOK {
		t.Errorf("manifest after failed index write: %d, want 200", resp.StatusCode)
	}
}

// Manifest bodies the handler copies must reach Distribution unchanged, also
// when they are too large to index (Distribution refuses those itself).
func TestReferrersPutPassThrough(t *testing.T) {
	r := startRegistry(t, nil)
	big := make([]byte, referrers.MaxManifestSize+10)
	for i := range big {
		big[i] = ' '
	}
	copy(big, `{"schemaVersion":2}`)
	resp, body := r.do(http.MethodPut, "/v2/a/manifests/big", http.Header{"Content-Type": {v1.MediaTypeImageManifest}}, big)
	if resp.StatusCode/100 != 4 || resp.Header.Get("OCI-Subject") != "" {
		t.Errorf("oversized manifest: %d %s", resp.StatusCode, body)
	}
	// A subject-carrying manifest whose Content-Type disagrees with nothing
	// but lacks mediaType in the body is indexed with the Content-Type.
	img := r.pushImage("a", "v1")
	cfg := r.pushBlob("a", []byte("{}"), v1.MediaTypeEmptyJSON)
	raw := fmt.Appendf(nil, `{"schemaVersion":2,"artifactType":%q,"config":{"mediaType":%q,"digest":%q,"size":2},"layers":[{"mediaType":%q,"digest":%q,"size":2}],"subject":{"mediaType":%q,"digest":%q,"size":%d}}`,
		sigType, v1.MediaTypeEmptyJSON, cfg.Digest, v1.MediaTypeEmptyJSON, cfg.Digest, img.MediaType, img.Digest, img.Size)
	resp, body = r.do(http.MethodPut, "/v2/a/manifests/"+digest.FromBytes(raw).String(), http.Header{"Content-Type": {v1.MediaTypeImageManifest}}, raw)
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("OCI-Subject") != img.Digest.String() {
		t.Fatalf("manifest without mediaType: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	_, idx := r.referrers("a", img.Digest, "")
	if len(idx.Manifests) != 1 || idx.Manifests[0].MediaType != v1.MediaTypeImageManifest || idx.Manifests[0].Size != int64(len(raw)) {
		t.Errorf("referrers: %+v", idx.Manifests)
	}
}

// raceHandler is the referrers handler in front of a fake Distribution that
// answers status for every request, over an in-memory index, with the
// revision link reported as linked.
func raceHandler(t *testing.T, status int, payload []byte, linked bool) (http.Handler, *referrers.Index) {
	t.Helper()
	d := inmemory.New()
	if err := d.PutContent(t.Context(), layout.BlobDataPath(digest.FromBytes(payload)), payload); err != nil {
		t.Fatal(err)
	}
	b := backendFromDriver(d)
	b.linked = func(context.Context, string, digest.Digest) (bool, error) { return linked, nil }
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Docker-Content-Digest", digest.FromBytes(payload).String())
		w.WriteHeader(status)
	})
	h := newReferrersHandler(&configuration.Configuration{}, b, &accessControl{}, next)
	return h, referrers.New(d)
}

// The index follows the revision link when a PUT and a DELETE of the same
// referrer race: each side re-checks the link after its index update.
func TestReferrersPutDeleteRace(t *testing.T) {
	subject := digest.FromString("subject")
	payload := fmt.Appendf(nil, `{"schemaVersion":2,"mediaType":%q,"artifactType":"a/b","config":{"mediaType":%q,"digest":%q,"size":2},"layers":[],"subject":{"mediaType":%q,"digest":%q,"size":1}}`,
		v1.MediaTypeImageManifest, v1.MediaTypeEmptyJSON, digest.FromString("{}"), v1.MediaTypeImageManifest, subject)
	d := digest.FromBytes(payload)
	put := func(h http.Handler) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPut, "/v2/a/manifests/"+d.String(), bytes.NewReader(payload)))
		return rec
	}
	del := func(h http.Handler) {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodDelete, "/v2/a/manifests/"+d.String(), nil))
	}
	list := func(idx *referrers.Index) int {
		got, err := idx.List(t.Context(), "a", subject)
		if err != nil {
			t.Fatal(err)
		}
		return len(got)
	}

	t.Run("PUT indexes after a racing DELETE unlinked", func(t *testing.T) {
		h, idx := raceHandler(t, http.StatusCreated, payload, false)
		if rec := put(h); rec.Header().Get("OCI-Subject") != "" || list(idx) != 0 {
			t.Errorf("OCI-Subject %q, %d entries; want none: the manifest is gone", rec.Header().Get("OCI-Subject"), list(idx))
		}
	})
	t.Run("PUT indexes a linked manifest", func(t *testing.T) {
		h, idx := raceHandler(t, http.StatusCreated, payload, true)
		if rec := put(h); rec.Header().Get("OCI-Subject") != subject.String() || list(idx) != 1 {
			t.Errorf("OCI-Subject %q, %d entries; want %s and 1", rec.Header().Get("OCI-Subject"), list(idx), subject)
		}
	})
	t.Run("DELETE unindexes after a racing PUT relinked", func(t *testing.T) {
		h, idx := raceHandler(t, http.StatusAccepted, payload, true)
		if err := idx.Add(t.Context(), "a", subject, v1.Descriptor{MediaType: v1.MediaTypeImageManifest, Digest: d, Size: 1}); err != nil {
			t.Fatal(err)
		}
		del(h)
		got, _ := idx.List(t.Context(), "a", subject)
		if len(got) != 1 || got[0].ArtifactType != "a/b" || got[0].Size != int64(len(payload)) {
			t.Errorf("after DELETE raced by a PUT: %+v, want the entry back, rebuilt from the payload", got)
		}
	})
	t.Run("DELETE unindexes an unlinked manifest", func(t *testing.T) {
		h, idx := raceHandler(t, http.StatusAccepted, payload, false)
		if err := idx.Add(t.Context(), "a", subject, v1.Descriptor{MediaType: v1.MediaTypeImageManifest, Digest: d, Size: 1}); err != nil {
			t.Fatal(err)
		}
		if del(h); list(idx) != 0 {
			t.Errorf("%d entries after DELETE, want 0", list(idx))
		}
	})
	t.Run("failed DELETE keeps the entry", func(t *testing.T) {
		h, idx := raceHandler(t, http.StatusNotFound, payload, false)
		if err := idx.Add(t.Context(), "a", subject, v1.Descriptor{MediaType: v1.MediaTypeImageManifest, Digest: d, Size: 1}); err != nil {
			t.Fatal(err)
		}
		if del(h); list(idx) != 1 {
			t.Errorf("%d entries after a 404 DELETE, want 1", list(idx))
		}
	})
}
