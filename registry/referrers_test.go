package registry

import (
	"bytes"
	"context"
	"encoding/json"
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
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
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
	k := pushReferrerKinds(t, r, repo, img)
	checkListing(t, r, repo, img, k)

	// artifactType filter.
	resp, idx := r.referrers(repo, img.Digest, "artifactType="+url.QueryEscape(sbomType))
	if resp.Header.Get("OCI-Filters-Applied") != "artifactType" {
		t.Errorf("OCI-Filters-Applied = %q", resp.Header.Get("OCI-Filters-Applied"))
	}
	if len(idx.Manifests) != 1 || idx.Manifests[0].Digest != k.sbom.Digest {
		t.Errorf("filtered by %s: %+v", sbomType, idx.Manifests)
	}
	if _, idx = r.referrers(repo, img.Digest, "artifactType=none"); len(idx.Manifests) != 0 {
		t.Errorf("filter matching nothing: %+v", idx.Manifests)
	}

	// Empty index, not 404: a digest nobody refers to, a missing repository.
	for _, c := range []struct{ repo, subject string }{{repo, k.other.Digest.String()}, {"no/such/repo", img.Digest.String()}} {
		resp, idx := r.referrers(c.repo, digest.Digest(c.subject), "")
		if resp.StatusCode != http.StatusOK || len(idx.Manifests) != 0 {
			t.Errorf("%s %s: %d %+v, want 200 and an empty index", c.repo, c.subject, resp.StatusCode, idx.Manifests)
		}
	}

	checkDeletes(t, r, repo, img, k)

	// HEAD answers the headers only.
	if resp, body := r.do(http.MethodHead, "/v2/"+repo+"/referrers/"+img.Digest.String(), nil, nil); resp.StatusCode != http.StatusOK || len(body) != 0 ||
		resp.Header.Get("Content-Type") != v1.MediaTypeImageIndex {
		t.Errorf("HEAD: %d %q %v", resp.StatusCode, body, resp.Header)
	}
}

// referrerKinds are the referrers pushKinds pushed, and a manifest without
// a subject.
type referrerKinds struct{ sig, sbom, list, other v1.Descriptor }

// pushReferrerKinds pushes to repo each kind of referrer of img a client
// pushes, and a manifest without a subject; only the referrers answer with
// OCI-Subject.
func pushReferrerKinds(t *testing.T, r *testRegistry, repo string, img v1.Descriptor) referrerKinds {
	t.Helper()
	var k referrerKinds
	wantSubject := func(what string, resp *http.Response) {
		t.Helper()
		if got := resp.Header.Get("OCI-Subject"); got != img.Digest.String() {
			t.Errorf("%s: OCI-Subject = %q, want %q", what, got, img.Digest)
		}
	}
	// oras attach: artifactType on the manifest, annotations.
	var resp *http.Response
	k.sig, resp = r.attach(repo, img, sigType, map[string]string{"org.opencontainers.image.created": "2026-01-01T00:00:00Z"})
	wantSubject("oras-style push", resp)

	// regctl artifact put --subject (1.0 style): no artifactType, the
	// artifact type is the config's media type; pushed by tag.
	cfg := r.pushBlob(repo, []byte(`{"sbom":true}`), sbomType)
	layer := r.pushBlob(repo, []byte("sbom body"), "application/spdx+json")
	subj := v1.Descriptor{MediaType: img.MediaType, Digest: img.Digest, Size: img.Size}
	k.sbom, resp = r.putManifest(repo, "sbom", v1.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: v1.MediaTypeImageManifest,
		Config:    cfg,
		Layers:    []v1.Descriptor{layer},
		Subject:   &subj,
	})
	wantSubject("regctl-style push", resp)

	// An index with a subject: artifactType only if the index has one.
	k.list, resp = r.putManifest(repo, "", v1.Index{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: v1.MediaTypeImageIndex,
		Manifests: []v1.Descriptor{k.sig},
		Subject:   &subj,
	})
	wantSubject("index push", resp)

	// A manifest without a subject gets no OCI-Subject.
	k.other = r.pushImage(repo, "v2")
	if _, resp := r.putManifest(repo, "v2", v1.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: v1.MediaTypeImageManifest,
		Config: cfg, Layers: []v1.Descriptor{layer},
	}); resp.Header.Get("OCI-Subject") != "" {
		t.Error("OCI-Subject on a manifest without subject")
	}
	return k
}

// checkListing: the referrers of img are the three referrers pushed, each
// with its media type, size, artifact type and annotations, on one page
// with no filter applied.
func checkListing(t *testing.T, r *testRegistry, repo string, img v1.Descriptor, k referrerKinds) {
	t.Helper()
	resp, idx := r.referrers(repo, img.Digest, "")
	if resp.StatusCode != http.StatusOK || len(idx.Manifests) != 3 {
		t.Fatalf("referrers: %d, %d entries (%+v); want 200 with 3", resp.StatusCode, len(idx.Manifests), idx.Manifests)
	}
	if resp.Header.Get("OCI-Filters-Applied") != "" || resp.Header.Get("Link") != "" {
		t.Errorf("unfiltered single page: headers %v", resp.Header)
	}
	for _, want := range []v1.Descriptor{
		{MediaType: v1.MediaTypeImageManifest, Digest: k.sig.Digest, Size: k.sig.Size, ArtifactType: sigType, Annotations: k.sig.Annotations},
		{MediaType: v1.MediaTypeImageManifest, Digest: k.sbom.Digest, Size: k.sbom.Size, ArtifactType: sbomType},
		{MediaType: v1.MediaTypeImageIndex, Digest: k.list.Digest, Size: k.list.Size},
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
}

// checkDeletes: deleting a tag keeps its manifest a referrer, deleting a
// referrer by digest removes it, a failed delete changes nothing, and
// pushing it again brings it back.
func checkDeletes(t *testing.T, r *testRegistry, repo string, img v1.Descriptor, k referrerKinds) {
	t.Helper()
	if resp, body := r.do(http.MethodDelete, "/v2/"+repo+"/manifests/sbom", nil, nil); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("delete tag: %d %s", resp.StatusCode, body)
	}
	if _, idx := r.referrers(repo, img.Digest, ""); findDesc(idx, k.sbom.Digest) == nil {
		t.Error("tag delete removed the referrer")
	}
	if resp, body := r.do(http.MethodDelete, "/v2/"+repo+"/manifests/"+k.sig.Digest.String(), nil, nil); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("delete manifest: %d %s", resp.StatusCode, body)
	}
	if _, idx := r.referrers(repo, img.Digest, ""); findDesc(idx, k.sig.Digest) != nil || len(idx.Manifests) != 2 {
		t.Errorf("after deleting %s: %+v", k.sig.Digest, idx.Manifests)
	}
	// A failed delete (404: already gone) changes nothing.
	if resp, _ := r.do(http.MethodDelete, "/v2/"+repo+"/manifests/"+k.sig.Digest.String(), nil, nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("second delete: %d, want 404", resp.StatusCode)
	}
	r.attach(repo, img, sigType, k.sig.Annotations)
	if _, idx := r.referrers(repo, img.Digest, ""); len(idx.Manifests) != 3 {
		t.Errorf("after re-push: %d entries, want 3", len(idx.Manifests))
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
