package registrytest

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// LayerSize is the size of the random file in each layer RandomImage makes:
// big enough to be a real blob, small enough that tests stay fast.
const LayerSize = 2048

// ArtifactType is the artifactType of the manifests PushArtifact pushes.
const ArtifactType = "application/vnd.reclaim.test.artifact"

// RandomImage returns an OCI image (OCI manifest, config and gzip layer media
// types) with the given number of random layers, for os/arch.
func RandomImage(t testing.TB, layers int, os, arch string) v1.Image {
	t.Helper()
	ls := make([]v1.Layer, layers)
	for i := range ls {
		l, err := random.Layer(LayerSize, types.OCILayer)
		if err != nil {
			t.Fatalf("registrytest: random layer: %v", err)
		}
		ls[i] = l
	}
	img := Image(t, ls...)
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatalf("registrytest: config: %v", err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = os, arch
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatalf("registrytest: set platform: %v", err)
	}
	return img
}

// Image returns an OCI image (OCI manifest and config media types) of the
// given layers.
func Image(t testing.TB, layers ...v1.Layer) v1.Image {
	t.Helper()
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err := mutate.AppendLayers(img, layers...)
	if err != nil {
		t.Fatalf("registrytest: append layers: %v", err)
	}
	return img
}

// PushImage pushes a random linux/amd64 OCI image with the given number of
// layers to ref ("repo:tag" or "repo@digest") and returns it.
func PushImage(t testing.TB, r *Registry, ref string, layers int) v1.Image {
	t.Helper()
	img := RandomImage(t, layers, "linux", "amd64")
	if err := remote.Write(r.Ref(t, ref), img, r.Remote(t)...); err != nil {
		t.Fatalf("registrytest: push image %s: %v", ref, err)
	}
	return img
}

// PushIndex pushes an OCI image index of two random two-layer images, one
// for linux/amd64 and one for linux/arm64, to ref and returns it.
func PushIndex(t testing.TB, r *Registry, ref string) v1.ImageIndex {
	t.Helper()
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, arch := range []string{"amd64", "arm64"} {
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add: RandomImage(t, 2, "linux", arch),
			Descriptor: v1.Descriptor{
				Platform: &v1.Platform{OS: "linux", Architecture: arch},
			},
		})
	}
	if err := remote.WriteIndex(r.Ref(t, ref), idx, r.Remote(t)...); err != nil {
		t.Fatalf("registrytest: push index %s: %v", ref, err)
	}
	return idx
}

// PushArtifact pushes an OCI artifact to repo by digest: an image manifest
// with ArtifactType, the empty config and one small random blob, whose
// subject is subject. It returns the artifact's descriptor.
//
// The manifest is built by hand and sent with remote.Put, byte for byte, the
// way oras and cosign push referrers.
func PushArtifact(t testing.TB, r *Registry, repo string, subject v1.Descriptor) v1.Descriptor {
	t.Helper()
	emptyJSON := static.NewLayer([]byte("{}"), types.OCIEmptyJSON)
	payload := make([]byte, 512)
	if _, err := rand.Read(payload); err != nil {
		t.Fatalf("registrytest: %v", err)
	}
	blob := static.NewLayer(payload, "application/vnd.reclaim.test.blob")
	layers := []v1.Layer{emptyJSON, blob}
	descs := make([]v1.Descriptor, len(layers))
	for i, l := range layers {
		if err := remote.WriteLayer(r.Repo(t, repo), l, r.Remote(t)...); err != nil {
			t.Fatalf("registrytest: push artifact blob: %v", err)
		}
		descs[i] = describeLayer(t, l)
	}
	subject = v1.Descriptor{MediaType: subject.MediaType, Size: subject.Size, Digest: subject.Digest}
	raw, err := json.Marshal(v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		ArtifactType:  ArtifactType,
		Config:        descs[0],
		Layers:        descs[1:],
		Subject:       &subject,
	})
	fatalIf(t, err)
	m := RawManifest{Bytes: raw, Type: types.OCIManifestSchema1}
	d := m.Descriptor(t)
	if err := remote.Put(r.Ref(t, repo+"@"+d.Digest.String()), m, r.Remote(t)...); err != nil {
		t.Fatalf("registrytest: push artifact to %s: %v", repo, err)
	}
	return d
}

// RawManifest is a manifest given as exact bytes, for remote.Put.
type RawManifest struct {
	Bytes []byte
	Type  types.MediaType
}

// RawManifest implements remote.Taggable.
func (m RawManifest) RawManifest() ([]byte, error) { return m.Bytes, nil }

// MediaType tells remote.Put which Content-Type to send.
func (m RawManifest) MediaType() (types.MediaType, error) { return m.Type, nil }

// Descriptor is the descriptor of the manifest's bytes.
func (m RawManifest) Descriptor(t testing.TB) v1.Descriptor {
	t.Helper()
	d, n, err := v1.SHA256(bytes.NewReader(m.Bytes))
	fatalIf(t, err)
	return v1.Descriptor{MediaType: m.Type, Size: n, Digest: d}
}

func describeLayer(t testing.TB, l v1.Layer) v1.Descriptor {
	t.Helper()
	d, err := l.Digest()
	fatalIf(t, err)
	n, err := l.Size()
	fatalIf(t, err)
	mt, err := l.MediaType()
	fatalIf(t, err)
	return v1.Descriptor{MediaType: mt, Size: n, Digest: d}
}

// Describe returns the descriptor of an image or index as pushed.
func Describe(t testing.TB, m interface {
	MediaType() (types.MediaType, error)
	RawManifest() ([]byte, error)
}) v1.Descriptor {
	t.Helper()
	raw, err := m.RawManifest()
	fatalIf(t, err)
	mt, err := m.MediaType()
	fatalIf(t, err)
	return RawManifest{Bytes: raw, Type: mt}.Descriptor(t)
}

// Tag points tag (in the same repository) at the manifest ref resolves to.
func Tag(t testing.TB, r *Registry, ref, tag string) {
	t.Helper()
	src := r.Ref(t, ref)
	desc, err := remote.Get(src, r.Remote(t)...)
	if err != nil {
		t.Fatalf("registrytest: get %s: %v", ref, err)
	}
	if err := remote.Tag(src.Context().Tag(tag), desc, r.Remote(t)...); err != nil {
		t.Fatalf("registrytest: tag %s as %s: %v", ref, tag, err)
	}
}

// TryMountBlob asks the registry to mount blob d from repository from into
// repository to (POST /v2/<to>/blobs/uploads/?mount=<d>&from=<from>) and
// returns the response status: 201 Created if it mounted the blob, 202
// Accepted if it fell back to starting an ordinary upload.
func TryMountBlob(t testing.TB, r *Registry, from, to string, d v1.Hash) int {
	t.Helper()
	q := url.Values{"mount": {d.String()}, "from": {from}}
	resp := r.Do(t, http.MethodPost, "/v2/"+to+"/blobs/uploads/?"+q.Encode(), nil)
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode == http.StatusAccepted {
		// Don't leave the upload the registry started dangling.
		if loc := resp.Header.Get("Location"); loc != "" {
			cancelUpload(t, r, loc)
		}
	}
	return resp.StatusCode
}

// MountBlob mounts blob d from repository from into repository to and fails
// the test unless the registry answered 201 Created, that is, really
// mounted it instead of starting an upload.
func MountBlob(t testing.TB, r *Registry, from, to string, d v1.Hash) {
	t.Helper()
	if got := TryMountBlob(t, r, from, to, d); got != http.StatusCreated {
		t.Fatalf("registrytest: mount %s from %s into %s: status %d, want %d", d, from, to, got, http.StatusCreated)
	}
}

func cancelUpload(t testing.TB, r *Registry, location string) {
	t.Helper()
	u, err := url.Parse(location)
	if err != nil {
		t.Errorf("registrytest: upload location %q: %v", location, err)
		return
	}
	path := u.Path
	if u.RawQuery != "" {
		path += "?" + u.RawQuery
	}
	resp := r.Do(t, http.MethodDelete, path, nil)
	resp.Body.Close()
}

// ManifestStatus returns the status of HEAD /v2/<repo>/manifests/<tag or
// digest> for ref ("repo:tag" or "repo@digest"): 200 while it exists, 404
// once deleted.
func ManifestStatus(t testing.TB, r *Registry, ref string) int {
	t.Helper()
	parsed := r.Ref(t, ref)
	resp := r.Do(t, http.MethodHead, manifestPath(parsed), http.Header{"Accept": manifestAccept})
	resp.Body.Close()
	return resp.StatusCode
}

// BlobStatus returns the status of HEAD /v2/<repo>/blobs/<d>.
func BlobStatus(t testing.TB, r *Registry, repo string, d v1.Hash) int {
	t.Helper()
	resp := r.Do(t, http.MethodHead, fmt.Sprintf("/v2/%s/blobs/%s", repo, d), nil)
	resp.Body.Close()
	return resp.StatusCode
}

func manifestPath(ref name.Reference) string {
	return fmt.Sprintf("/v2/%s/manifests/%s", ref.Context().RepositoryStr(), ref.Identifier())
}

// fatalIf fails the test on err, a failure of the client library's own
// calls.
func fatalIf(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("registrytest: %v", err)
	}
}
