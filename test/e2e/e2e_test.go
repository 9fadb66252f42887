package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/reclaim-registry/reclaim/registry/registrytest"
)

func TestMain(m *testing.M) { registrytest.Main(m) }

// servers runs f against an in-process registry and against the real binary.
func servers(t *testing.T, f func(t *testing.T, r *registrytest.Registry)) {
	t.Run("in-process", func(t *testing.T) {
		t.Parallel()
		f(t, registrytest.Start(t))
	})
	t.Run("process", func(t *testing.T) {
		t.Parallel()
		f(t, registrytest.StartProcess(t).Registry)
	})
}

// TestClientWorkflow walks through what a registry's clients do in a day:
// push, tag, push multi-platform and attached artifacts, mount across
// repositories, pull by tag and digest, untag, delete.
func TestClientWorkflow(t *testing.T) {
	t.Parallel()
	servers(t, func(t *testing.T, r *registrytest.Registry) {
		img := pushAndTag(t, r)
		imgDesc := registrytest.Describe(t, img)
		pushMultiPlatform(t, r)

		// An artifact whose subject is the image, listed by the referrers API.
		art := registrytest.PushArtifact(t, r, "team/app", imgDesc)
		registrytest.AssertPullable(t, r, "team/app@"+art.Digest.String())
		assertSubject(t, r, "team/app@"+art.Digest.String(), imgDesc.Digest)
		assertReferrers(t, r, "team/app", imgDesc.Digest, art.Digest)

		mountImage(t, r, img, "team/app", "other/app:mounted")
		deleteTagAndManifest(t, r, imgDesc)
		// Other repositories are untouched.
		registrytest.AssertPullable(t, r, "other/app:mounted")
		registrytest.AssertPullable(t, r, "team/multi:1.0")
	})
}

// pushAndTag pushes an image with several layers as team/app:v1, pulls it
// by tag and by digest, and tags it stable as well.
func pushAndTag(t *testing.T, r *registrytest.Registry) v1.Image {
	t.Helper()
	img := registrytest.PushImage(t, r, "team/app:v1", 4)
	imgDesc := registrytest.Describe(t, img)
	if got := registrytest.AssertPullable(t, r, "team/app:v1"); got.Digest != imgDesc.Digest {
		t.Fatalf("team/app:v1 is %s, pushed %s", got.Digest, imgDesc.Digest)
	}
	registrytest.AssertPullable(t, r, "team/app@"+imgDesc.Digest.String())

	// A second tag on the same manifest.
	registrytest.Tag(t, r, "team/app:v1", "stable")
	if got := registrytest.AssertPullable(t, r, "team/app:stable"); got.Digest != imgDesc.Digest {
		t.Fatalf("team/app:stable is %s, want %s", got.Digest, imgDesc.Digest)
	}
	assertTags(t, r, "team/app", "stable", "v1")
	return img
}

// pushMultiPlatform pushes an OCI index with two platforms as
// team/multi:1.0 and pulls it by tag and by digest.
func pushMultiPlatform(t *testing.T, r *registrytest.Registry) {
	t.Helper()
	idx := registrytest.PushIndex(t, r, "team/multi:1.0")
	idxDesc := registrytest.Describe(t, idx)
	if got := registrytest.AssertPullable(t, r, "team/multi:1.0"); got.Digest != idxDesc.Digest || got.MediaType != types.OCIImageIndex {
		t.Fatalf("team/multi:1.0 is %s %s, want %s %s", got.MediaType, got.Digest, types.OCIImageIndex, idxDesc.Digest)
	}
	registrytest.AssertPullable(t, r, "team/multi@"+idxDesc.Digest.String())
	assertPlatforms(t, r, "team/multi:1.0", "linux/amd64", "linux/arm64")
}

// mountImage mounts every blob of img from repository from into the
// repository of ref: each must answer 201 (mounted), not 202 (a fallback
// upload), and then the manifest can be pushed as ref without uploading
// anything.
func mountImage(t *testing.T, r *registrytest.Registry, img v1.Image, from, ref string) {
	t.Helper()
	to, _, _ := strings.Cut(ref, ":")
	for _, d := range imageBlobs(t, img) {
		if got := registrytest.BlobStatus(t, r, to, d); got != http.StatusNotFound {
			t.Fatalf("blob %s visible in %s before the mount: status %d", d, to, got)
		}
		registrytest.MountBlob(t, r, from, to, d)
	}
	raw, err := img.RawManifest()
	if err != nil {
		t.Fatal(err)
	}
	putManifest(t, r, ref, raw, registrytest.Describe(t, img).MediaType)
	registrytest.AssertPullable(t, r, ref)
}

// imageBlobs lists img's config and layers.
func imageBlobs(t *testing.T, img v1.Image) []v1.Hash {
	t.Helper()
	cfgDigest, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	blobs := []v1.Hash{cfgDigest}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			t.Fatal(err)
		}
		blobs = append(blobs, d)
	}
	return blobs
}

// deleteTagAndManifest deletes the tag team/app:stable (the manifest and
// its other tag stay), then the manifest by digest (the tags that pointed
// at it go too).
func deleteTagAndManifest(t *testing.T, r *registrytest.Registry, img v1.Descriptor) {
	t.Helper()
	if err := remote.Delete(r.Ref(t, "team/app:stable"), r.Remote(t)...); err != nil {
		t.Fatalf("delete tag team/app:stable: %v", err)
	}
	if got := registrytest.ManifestStatus(t, r, "team/app:stable"); got != http.StatusNotFound {
		t.Fatalf("team/app:stable after tag delete: status %d, want 404", got)
	}
	registrytest.AssertPullable(t, r, "team/app:v1")
	assertTags(t, r, "team/app", "v1")

	if err := remote.Delete(r.Ref(t, "team/app@"+img.Digest.String()), r.Remote(t)...); err != nil {
		t.Fatalf("delete manifest %s: %v", img.Digest, err)
	}
	for _, ref := range []string{"team/app@" + img.Digest.String(), "team/app:v1"} {
		if got := registrytest.ManifestStatus(t, r, ref); got != http.StatusNotFound {
			t.Errorf("%s after manifest delete: status %d, want 404", ref, got)
		}
	}
}

// A crash (SIGKILL) loses nothing that was acknowledged, and a restarted
// registry serves it from the same storage.
func TestProcessKillAndRestart(t *testing.T) {
	t.Parallel()
	p := registrytest.StartProcess(t)
	img := registrytest.PushImage(t, p.Registry, "crash/app:v1", 2)
	pid := p.PID()

	p.Kill(t)
	if resp, err := http.Get(p.URL + "/v2/"); err == nil {
		resp.Body.Close()
		t.Fatalf("registry still answers after SIGKILL (status %d)", resp.StatusCode)
	}

	p.Restart(t)
	if p.PID() == pid || p.PID() == 0 {
		t.Fatalf("restart kept pid %d (now %d)", pid, p.PID())
	}
	got := registrytest.AssertPullable(t, p.Registry, "crash/app:v1")
	if want := registrytest.Describe(t, img); got.Digest != want.Digest {
		t.Fatalf("after restart crash/app:v1 is %s, want %s", got.Digest, want.Digest)
	}
	resp, err := http.Get(p.DebugURL + "/metrics")
	if err != nil {
		t.Fatalf("debug server after restart: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s/metrics: status %d", p.DebugURL, resp.StatusCode)
	}
}

// Two instances on one storage root see each other's pushes, as two
// replicas behind a load balancer must.
func TestProcessesShareStorage(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	a := registrytest.StartProcess(t, registrytest.WithRootDirectory(root))
	b := registrytest.StartProcess(t, registrytest.WithRootDirectory(root))
	if a.PID() == b.PID() || a.URL == b.URL {
		t.Fatalf("both instances are %d at %s", a.PID(), a.URL)
	}
	registrytest.PushImage(t, a.Registry, "shared/app:from-a", 2)
	registrytest.PushIndex(t, b.Registry, "shared/app:from-b")
	registrytest.AssertPullable(t, b.Registry, "shared/app:from-a")
	registrytest.AssertPullable(t, a.Registry, "shared/app:from-b")
}

// assertTags checks the tag list of repo. It also proves that the artifact
// push went through the referrers API: go-containerregistry would have
// written a "sha256-<hex>" referrers-schema tag if the registry lacked it.
func assertTags(t *testing.T, r *registrytest.Registry, repo string, want ...string) {
	t.Helper()
	got, err := remote.List(r.Repo(t, repo), r.Remote(t)...)
	if err != nil {
		t.Fatalf("list tags of %s: %v", repo, err)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("tags of %s: %v, want %v", repo, got, want)
	}
}

func assertPlatforms(t *testing.T, r *registrytest.Registry, ref string, want ...string) {
	t.Helper()
	idx, err := remote.Index(r.Ref(t, ref), r.Remote(t)...)
	if err != nil {
		t.Fatalf("get index %s: %v", ref, err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range m.Manifests {
		if d.Platform == nil {
			t.Fatalf("%s: child %s has no platform", ref, d.Digest)
		}
		got = append(got, d.Platform.OS+"/"+d.Platform.Architecture)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("platforms of %s: %v, want %v", ref, got, want)
	}
}

func assertSubject(t *testing.T, r *registrytest.Registry, ref string, subject v1.Hash) {
	t.Helper()
	desc, err := remote.Get(r.Ref(t, ref), r.Remote(t)...)
	if err != nil {
		t.Fatalf("get %s: %v", ref, err)
	}
	var m v1.Manifest
	if err := json.Unmarshal(desc.Manifest, &m); err != nil {
		t.Fatal(err)
	}
	if m.Subject == nil || m.Subject.Digest != subject {
		t.Fatalf("%s: subject %v, want %s", ref, m.Subject, subject)
	}
	if m.ArtifactType != registrytest.ArtifactType {
		t.Fatalf("%s: artifactType %q, want %q", ref, m.ArtifactType, registrytest.ArtifactType)
	}
}

// assertReferrers checks that the referrers API lists referrer for subject.
func assertReferrers(t *testing.T, r *registrytest.Registry, repo string, subject, referrer v1.Hash) {
	t.Helper()
	resp := r.Do(t, http.MethodGet, "/v2/"+repo+"/referrers/"+subject.String(), http.Header{"Accept": {string(types.OCIImageIndex)}})
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET referrers of %s: status %d: %s", subject, resp.StatusCode, body)
	}
	var idx v1.IndexManifest
	if err := json.Unmarshal(body, &idx); err != nil {
		t.Fatalf("referrers of %s: %v", subject, err)
	}
	for _, d := range idx.Manifests {
		if d.Digest == referrer {
			return
		}
	}
	t.Fatalf("referrers of %s do not list %s: %s", subject, referrer, body)
}

func putManifest(t *testing.T, r *registrytest.Registry, ref string, raw []byte, mt types.MediaType) {
	t.Helper()
	m := registrytest.RawManifest{Bytes: raw, Type: mt}
	if err := remote.Put(r.Ref(t, ref), m, r.Remote(t)...); err != nil {
		t.Fatalf("put manifest %s: %v", ref, err)
	}
}
