package e2e

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/reclaim-registry/reclaim/registry/registrytest"
)

// sbomConfigType is the artifact type of the regctl-style push: like
// `regctl artifact put --config-type ... --subject`, it has no artifactType
// and the config media type says what it is.
const sbomConfigType = "application/vnd.example.sbom.config.v1+json"

// TestReferrersClients pushes referrers the way oras and regctl do and
// discovers them the way clients do (go-containerregistry's
// remote.Referrers), with the tag fallback turned off: they must come from
// the OCI 1.1 referrers API, and no sha256-<hex> fallback tag may appear.
func TestReferrersClients(t *testing.T) {
	t.Parallel()
	servers(t, func(t *testing.T, r *registrytest.Registry) {
		const repo = "team/signed"
		img := registrytest.Describe(t, registrytest.PushImage(t, r, repo+":v1", 1))

		// oras attach: artifactType, empty config, by digest, remote.Put.
		oras := registrytest.PushArtifact(t, r, repo, img)
		// regctl artifact put --subject, by tag, raw HTTP; regctl reads
		// OCI-Subject to decide whether to maintain the fallback tag.
		regctl, subjectHeader := pushRegctlStyle(t, r, repo, "sbom-v1", img)
		if subjectHeader != img.Digest.String() {
			t.Errorf("OCI-Subject = %q, want %s", subjectHeader, img.Digest)
		}

		opts := append(r.Remote(t), remote.WithReferrersTagFallback(false))
		subject, ok := r.Ref(t, repo+"@"+img.Digest.String()).(name.Digest)
		if !ok {
			t.Fatal("not a digest reference")
		}
		got := referrers(t, subject, opts...)
		if len(got) != 2 {
			t.Fatalf("referrers of %s: %+v, want the oras and the regctl artifact", img.Digest, got)
		}
		for _, want := range []v1.Descriptor{
			{MediaType: types.OCIManifestSchema1, Digest: oras.Digest, Size: oras.Size, ArtifactType: registrytest.ArtifactType},
			{MediaType: types.OCIManifestSchema1, Digest: regctl.Digest, Size: regctl.Size, ArtifactType: sbomConfigType,
				Annotations: map[string]string{"org.example.tool": "regctl"}},
		} {
			i := slices.IndexFunc(got, func(d v1.Descriptor) bool { return d.Digest == want.Digest })
			if i < 0 {
				t.Errorf("%s missing from %+v", want.Digest, got)
				continue
			}
			d := got[i]
			if d.MediaType != want.MediaType || d.Size != want.Size || d.ArtifactType != want.ArtifactType ||
				d.Annotations["org.example.tool"] != want.Annotations["org.example.tool"] {
				t.Errorf("referrer %+v, want %+v", d, want)
			}
		}

		// Filtered by artifact type, as `oras discover --artifact-type`.
		filtered := referrers(t, subject, append(opts, remote.WithFilter("artifactType", sbomConfigType))...)
		if len(filtered) != 1 || filtered[0].Digest != regctl.Digest {
			t.Errorf("filtered referrers: %+v, want only %s", filtered, regctl.Digest)
		}

		fallback := repo + ":" + strings.Replace(img.Digest.String(), ":", "-", 1)
		if s := registrytest.ManifestStatus(t, r, fallback); s != http.StatusNotFound {
			t.Errorf("fallback tag %s exists (status %d): a client did not trust the referrers API", fallback, s)
		}

		// Deleting a referrer takes it out of the list; the subject stays.
		if err := remote.Delete(r.Ref(t, repo+"@"+oras.Digest.String()), r.Remote(t)...); err != nil {
			t.Fatal(err)
		}
		got = referrers(t, subject, opts...)
		if len(got) != 1 || got[0].Digest != regctl.Digest {
			t.Errorf("after deleting %s: %+v", oras.Digest, got)
		}
		registrytest.AssertPullable(t, r, repo+":v1")
	})
}

func referrers(t *testing.T, subject name.Digest, opts ...remote.Option) []v1.Descriptor {
	t.Helper()
	idx, err := remote.Referrers(subject, opts...)
	if err != nil {
		t.Fatalf("referrers of %s: %v", subject, err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	return m.Manifests
}

// pushRegctlStyle pushes an SBOM artifact the way regctl does: config blob
// typed with the artifact type, one layer, subject, annotations, PUT by tag
// with raw HTTP. It returns the manifest's descriptor and the OCI-Subject
// response header.
func pushRegctlStyle(t *testing.T, r *registrytest.Registry, repo, tag string, subject v1.Descriptor) (v1.Descriptor, string) {
	t.Helper()
	config := static.NewLayer([]byte(`{"format":"spdx"}`), sbomConfigType)
	layer := static.NewLayer([]byte(`{"spdxVersion":"SPDX-2.3"}`), "application/spdx+json")
	var descs []v1.Descriptor
	for _, l := range []v1.Layer{config, layer} {
		if err := remote.WriteLayer(r.Repo(t, repo), l, r.Remote(t)...); err != nil {
			t.Fatal(err)
		}
		d, err := l.Digest()
		if err != nil {
			t.Fatal(err)
		}
		size, _ := l.Size()
		mt, _ := l.MediaType()
		descs = append(descs, v1.Descriptor{MediaType: mt, Digest: d, Size: size})
	}
	raw, err := json.Marshal(v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		Config:        descs[0],
		Layers:        descs[1:],
		Subject:       &v1.Descriptor{MediaType: subject.MediaType, Digest: subject.Digest, Size: subject.Size},
		Annotations:   map[string]string{"org.example.tool": "regctl"},
	})
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, r.URL+"/v2/"+repo+"/manifests/"+tag, bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", string(types.OCIManifestSchema1))
	if r.Username != "" {
		req.SetBasicAuth(r.Username, r.Password)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("PUT %s:%s: status %d", repo, tag, resp.StatusCode)
	}
	return registrytest.RawManifest{Bytes: raw, Type: types.OCIManifestSchema1}.Descriptor(t), resp.Header.Get("OCI-Subject")
}
