package registrytest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// manifestAccept lists every manifest type a client may ask for, so the
// registry never has to convert or refuse.
var manifestAccept = []string{
	string(types.OCIImageIndex),
	string(types.OCIManifestSchema1),
	string(types.DockerManifestList),
	string(types.DockerManifestSchema2),
}

// AssertPullable pulls ref ("repo:tag" or "repo@digest") the way a client
// would and fails the test unless every byte it gets back matches its
// digest: the manifest (against the requested digest and the
// Docker-Content-Digest header), then for an image its config and every
// layer, and for an index every child manifest, recursively. Layers with
// foreign URLs (non-distributable) are not fetched: a registry does not hold
// them. It returns the descriptor of the top-level manifest.
//
// It talks plain HTTP rather than through go-containerregistry's pull path,
// so a registry bug cannot hide behind client-side verification or retries.
func AssertPullable(t testing.TB, r *Registry, ref string) v1.Descriptor {
	t.Helper()
	parsed := r.Ref(t, ref)
	p := puller{t: t, r: r, repo: parsed.Context()}
	want := v1.Descriptor{}
	if d, ok := parsed.(name.Digest); ok {
		h, err := v1.NewHash(d.DigestStr())
		if err != nil {
			t.Fatalf("registrytest: %v", err)
		}
		want.Digest = h
	}
	return p.manifest(parsed.Identifier(), want)
}

type puller struct {
	t    testing.TB
	r    *Registry
	repo name.Repository
}

// manifest fetches one manifest by tag or digest, checks it against want
// (whatever fields of want are set) and descends into what it references.
func (p *puller) manifest(id string, want v1.Descriptor) v1.Descriptor {
	p.t.Helper()
	path := fmt.Sprintf("/v2/%s/manifests/%s", p.repo.RepositoryStr(), id)
	body, resp := p.get(path, http.Header{"Accept": manifestAccept})
	if body == nil {
		return v1.Descriptor{}
	}
	got, n, err := v1.SHA256(bytes.NewReader(body))
	if err != nil {
		p.t.Fatalf("registrytest: %v", err)
	}
	if h := resp.Header.Get("Docker-Content-Digest"); h != "" && h != got.String() {
		p.t.Errorf("registrytest: GET %s: Docker-Content-Digest %s, but the body hashes to %s", path, h, got)
	}
	if want.Digest != (v1.Hash{}) && want.Digest != got {
		p.t.Errorf("registrytest: GET %s: body hashes to %s, want %s", path, got, want.Digest)
	}
	if want.Size != 0 && want.Size != n {
		p.t.Errorf("registrytest: GET %s: %d bytes, want %d", path, n, want.Size)
	}

	var m struct {
		MediaType types.MediaType `json:"mediaType"`
		Config    *v1.Descriptor  `json:"config"`
		Layers    []v1.Descriptor `json:"layers"`
		Manifests []v1.Descriptor `json:"manifests"`
	}
	if err := json.Unmarshal(body, &m); err != nil {
		p.t.Errorf("registrytest: GET %s: not a manifest: %v", path, err)
		return v1.Descriptor{}
	}
	mt := m.MediaType
	if mt == "" {
		mt = types.MediaType(resp.Header.Get("Content-Type"))
	}
	if want.MediaType != "" && want.MediaType != mt {
		p.t.Errorf("registrytest: GET %s: media type %s, want %s", path, mt, want.MediaType)
	}
	switch {
	case mt.IsIndex():
		for _, child := range m.Manifests {
			p.manifest(child.Digest.String(), child)
		}
	case mt.IsImage() || m.Config != nil:
		if m.Config == nil {
			p.t.Errorf("registrytest: GET %s: image manifest without config", path)
			break
		}
		p.blob(*m.Config)
		for _, l := range m.Layers {
			if len(l.URLs) > 0 {
				continue
			}
			p.blob(l)
		}
	default:
		p.t.Errorf("registrytest: GET %s: unexpected media type %q", path, mt)
	}
	return v1.Descriptor{MediaType: mt, Size: n, Digest: got}
}

// blob fetches one blob and checks its bytes against its descriptor.
func (p *puller) blob(d v1.Descriptor) {
	p.t.Helper()
	path := fmt.Sprintf("/v2/%s/blobs/%s", p.repo.RepositoryStr(), d.Digest)
	body, _ := p.get(path, nil)
	if body == nil {
		return
	}
	got, n, err := v1.SHA256(bytes.NewReader(body))
	if err != nil {
		p.t.Fatalf("registrytest: %v", err)
	}
	if got != d.Digest || n != d.Size {
		p.t.Errorf("registrytest: GET %s: %d bytes hashing to %s, want %d bytes hashing to %s", path, n, got, d.Size, d.Digest)
	}
}

// get returns the body of a 200 response, or nil after reporting the error.
func (p *puller) get(path string, header http.Header) ([]byte, *http.Response) {
	p.t.Helper()
	resp := p.r.Do(p.t, http.MethodGet, path, header)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		p.t.Errorf("registrytest: GET %s: %v", path, err)
		return nil, resp
	}
	if resp.StatusCode != http.StatusOK {
		p.t.Errorf("registrytest: GET %s: status %d: %s", path, resp.StatusCode, strings.TrimSpace(string(body)))
		return nil, resp
	}
	return body, resp
}
