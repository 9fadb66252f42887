package registry_test

import (
	"bytes"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	ggcrv1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/reclaim-registry/reclaim/registry/registrytest"
)

// send sends body to path on r and returns the status, the Location header
// and the response body.
func send(t testing.TB, r *registrytest.Registry, method, path string, header http.Header, body []byte) (int, string, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, r.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	code, h, b := roundTrip(t, req)
	return code, h.Get("Location"), b
}

// roundTrip sends req and returns the status, the headers and the body.
func roundTrip(t testing.TB, req *http.Request) (int, http.Header, []byte) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// startUpload opens an upload session in repo and returns the path (with
// its state query) to PATCH or PUT to.
func startUpload(t *testing.T, r *registrytest.Registry, repo string) string {
	t.Helper()
	status, loc, body := send(t, r, http.MethodPost, "/v2/"+repo+"/blobs/uploads/", nil, nil)
	if status != http.StatusAccepted || loc == "" {
		t.Fatalf("start upload: status %d, Location %q: %s", status, loc, body)
	}
	u, err := url.Parse(loc)
	if err != nil {
		t.Fatal(err)
	}
	return u.RequestURI()
}

func withParam(path, key, value string) string {
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	return path + sep + key + "=" + url.QueryEscape(value)
}

func sha512Of(b []byte) string {
	s := sha512.Sum512(b)
	return "sha512:" + hex.EncodeToString(s[:])
}

func sha256Of(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// storedFiles lists every file under root except upload sessions, with its
// size: what a refused request must leave as it was.
func storedFiles(t *testing.T, root string) string {
	t.Helper()
	var lines []string
	err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if !fi.IsDir() && !strings.Contains(p, "/_uploads/") {
			lines = append(lines, strings.TrimPrefix(p, root)+" "+fi.ModTime().Format(time.RFC3339Nano))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// wantDigestRefused checks a Distribution-style 400 DIGEST_INVALID body that
// says only sha256 is supported.
func wantDigestRefused(t *testing.T, what string, status int, body []byte) {
	t.Helper()
	var e struct {
		Errors []struct{ Code, Message string } `json:"errors"`
	}
	if status != http.StatusBadRequest || json.Unmarshal(body, &e) != nil || len(e.Errors) != 1 {
		t.Errorf("%s: status %d, body %s; want 400 with one error", what, status, body)
		return
	}
	if e.Errors[0].Code != "DIGEST_INVALID" || !strings.Contains(e.Errors[0].Message, "only sha256 digests are supported") ||
		!strings.Contains(e.Errors[0].Message, "sha512") {
		t.Errorf("%s: error %+v; want DIGEST_INVALID saying only sha256 is supported and naming sha512", what, e.Errors[0])
	}
}

// With the reclaim middleware, every request that would write a link under
// a sha512 digest is refused before Distribution sees it, and leaves the
// storage as it was: an upload commit (its alias link would hold the sha256
// digest under a sha512 path, where no reverse link protects the sha256
// blob), a monolithic POST, a mount, and a manifest PUT by sha512
// reference. sha256 pushes, including finishing the refused upload, still
// work.
func TestSha512LinksRefused(t *testing.T) {
	t.Parallel()
	r := registrytest.Start(t, registrytest.WithStorageMiddleware("reclaim", reclaimOptions(t, time.Hour, "")))
	img := registrytest.PushImage(t, r, "sha/app:v1", 1)
	m := manifestOf(t, img)
	blob := []byte("a blob pushed with a sha512 digest")
	before := storedFiles(t, r.Root)

	upload := refuseSha512Writes(t, r, blob, firstLayer(t, img), m)

	if after := storedFiles(t, r.Root); after != before {
		t.Fatalf("refused requests changed the storage:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if strings.Contains(before, "/sha512/") {
		t.Fatalf("a sha512 path in storage:\n%s", before)
	}

	// sha256 still works, on the very upload that was refused.
	status, _, body := send(t, r, http.MethodPut, withParam(upload, "digest", sha256Of(blob)), nil, nil)
	if status != http.StatusCreated {
		t.Fatalf("commit with sha256 after the refusal: status %d: %s", status, body)
	}
	h, err := ggcrv1.NewHash(sha256Of(blob))
	if err != nil {
		t.Fatal(err)
	}
	if got := registrytest.BlobStatus(t, r, "sha/app", h); got != http.StatusOK {
		t.Fatalf("HEAD of the sha256 blob: %d", got)
	}
	registrytest.MountBlob(t, r, "sha/app", "sha/other", h)
	status, _, body = send(t, r, http.MethodPut, "/v2/sha/app/manifests/"+m.Descriptor(t).Digest.String(), m.header(), m.Bytes)
	if status != http.StatusCreated {
		t.Fatalf("manifest PUT by sha256 digest: status %d: %s", status, body)
	}
	// Reads by sha512 are left to Distribution: a 404, not the refusal.
	resp := r.Do(t, http.MethodHead, "/v2/sha/app/blobs/"+sha512Of(blob), nil)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("HEAD by sha512: status %d, want 404 from Distribution", resp.StatusCode)
	}
	registrytest.AssertPullable(t, r, "sha/app:v1")
}

// refuseSha512Writes sends every write by a sha512 digest to sha/app and
// checks each is refused: an upload commit of blob (POST, PATCH, PUT
// ?digest=sha512), a monolithic PUT and POST of content, a mount of
// content, and a PUT of the manifest m by sha512 reference. It returns the
// refused upload's path, still open.
func refuseSha512Writes(t *testing.T, r *registrytest.Registry, blob, content []byte, m manifest) string {
	t.Helper()
	octets := http.Header{"Content-Type": {"application/octet-stream"}}
	upload := startUpload(t, r, "sha/app")
	status, loc, body := send(t, r, http.MethodPatch, upload, octets, blob)
	if status != http.StatusAccepted {
		t.Fatalf("PATCH: status %d: %s", status, body)
	}
	u, err := url.Parse(loc)
	if err != nil {
		t.Fatal(err)
	}
	upload = u.RequestURI()
	status, _, body = send(t, r, http.MethodPut, withParam(upload, "digest", sha512Of(blob)), nil, nil)
	wantDigestRefused(t, "upload commit", status, body)

	for _, c := range []struct{ what, method, path string }{
		{"monolithic PUT", http.MethodPut, withParam(startUpload(t, r, "sha/app"), "digest", sha512Of(content))},
		{"monolithic POST", http.MethodPost, withParam("/v2/sha/app/blobs/uploads/", "digest", sha512Of(content))},
	} {
		status, _, body = send(t, r, c.method, c.path, octets, content)
		wantDigestRefused(t, c.what, status, body)
	}
	status, _, body = send(t, r, http.MethodPost, "/v2/sha/other/blobs/uploads/?mount="+url.QueryEscape(sha512Of(content))+"&from=sha/app", nil, nil)
	wantDigestRefused(t, "mount", status, body)

	// Manifest PUT by sha512 reference (with and without a tag parameter).
	for _, path := range []string{"/v2/sha/app/manifests/" + sha512Of(m.Bytes), "/v2/sha/app/manifests/" + sha512Of(m.Bytes) + "?tag=v2"} {
		status, _, body = send(t, r, http.MethodPut, path, m.header(), m.Bytes)
		wantDigestRefused(t, "manifest PUT "+path, status, body)
	}
	return upload
}

// manifest is an image's manifest as a client PUTs it.
type manifest struct{ registrytest.RawManifest }

func (m manifest) header() http.Header { return http.Header{"Content-Type": {string(m.Type)}} }

func manifestOf(t *testing.T, img ggcrv1.Image) manifest {
	t.Helper()
	raw, err := img.RawManifest()
	if err != nil {
		t.Fatal(err)
	}
	mt, err := img.MediaType()
	if err != nil {
		t.Fatal(err)
	}
	return manifest{registrytest.RawManifest{Bytes: raw, Type: mt}}
}

// firstLayer is the compressed content of img's first layer.
func firstLayer(t *testing.T, img ggcrv1.Image) []byte {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	rc, err := layers[0].Compressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	content, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return content
}

// Without the reclaim middleware nothing changes: Distribution commits a
// sha512 upload as upstream does (storing it under sha256, with the alias
// link this package refuses when the middleware runs).
func TestSha512UpstreamWithoutReclaim(t *testing.T) {
	t.Parallel()
	r := registrytest.Start(t)
	blob := []byte("a blob pushed with a sha512 digest, upstream")
	status, _, body := send(t, r, http.MethodPut, withParam(startUpload(t, r, "up/app"), "digest", sha512Of(blob)),
		http.Header{"Content-Type": {"application/octet-stream"}}, blob)
	if status != http.StatusCreated {
		t.Fatalf("sha512 commit without the middleware: status %d: %s", status, body)
	}
	alias := filepath.Join(r.Root, "docker/registry/v2/repositories/up/app/_layers/sha512", strings.TrimPrefix(sha512Of(blob), "sha512:"), "link")
	if _, err := os.Stat(alias); err != nil {
		t.Fatalf("upstream wrote no sha512 alias link: %v", err)
	}
}
