package soak

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// TestFailedMountKeepsTargetTombstone follows, end to end, a soak finding
// ("manifest found, blob missing"): a cross-repository mount INTO a
// repository whose link to blob X GC deleted, from a source that does not
// have X either, fails (202) and writes no link, and must leave the
// target's deletion tombstone. The instance's blob descriptor cache still
// says the target has X; without the tombstone nothing checks it: HEAD
// answers 200, a client that trusts it skips the upload, and the manifest
// PUT is accepted with no layer link behind it. Once X's other repository
// lets go of it, GC deletes its data: an acknowledged, tagged image broken.
// storage's TestFailedMountKeepsTombstones forces the HEAD; this test
// follows it to the broken image, and shows the soak's link judge
// (judgeLinks) would catch it at the 201.
func TestFailedMountKeepsTargetTombstone(t *testing.T) {
	const w = time.Second
	r, m, raw := windowRegistry(t, w)
	ctx := context.Background()
	g := newSharedLayerRig(t, r, raw)

	// X is in mt/s (whose image goes) and in mt/u (whose image stays); the
	// instance's descriptor cache learns "mt/s has X" from the upload.
	sd, _ := g.push("mt/s:gone").Digest()
	g.push("mt/u:keep")
	if code := del(ctx, r, "/v2/mt/s/manifests/"+sd.String()); code != http.StatusAccepted {
		t.Fatalf("delete mt/s manifest: %d", code)
	}
	skipWindow(t, m, w) // nobody touched mt/s's objects for W
	rep := mustCollect(t, r, "mt/s")
	if !slices.Contains(rep.LayersUnlinked, g.x) || g.linked("mt/s") {
		t.Fatalf("the collect did not unlink X from mt/s: %+v", rep)
	}

	// A mount of X into mt/s from a repository without X: refused (202),
	// nothing written. The cache entry "mt/s has X" is stale and its
	// tombstone is what makes the next Stat look at the storage.
	if code := mount(ctx, r, "mt/none", "mt/s", g.xd); code != http.StatusAccepted {
		t.Fatalf("mount from a repository without the blob: %d, want 202", code)
	}
	if g.linked("mt/s") {
		t.Fatal("the refused mount linked X into mt/s")
	}
	if code := headBlob(ctx, r, "mt/s", g.xd).code; code != http.StatusNotFound {
		t.Errorf("HEAD mt/s/blobs/X after GC unlinked it and a mount into mt/s failed = %d, want 404", code)
	}

	// A client that trusts HEAD pushes an image with X into mt/s.
	nd, _ := g.push("mt/s:new").Digest()
	if !g.linked("mt/s") {
		t.Errorf("manifest PUT into mt/s acknowledged (201) with no layer link of X in mt/s")
	}
	// what the soak's judge (judgeLinks) says about it
	wl := &workload{c: &cluster{raw: raw}}
	if missing, err := wl.unlinked(ctx, "mt/s", digest.Digest(nd.String()), 0); err != nil || len(missing) > 0 {
		t.Errorf("soak judge: mt/s@%s does not link %v (%v)", nd, missing, err)
	}
	// mt/u lets go of X; GC deletes it (no reverse link is left).
	if code := del(ctx, r, "/v2/mt/u/manifests/keep"); code != http.StatusAccepted {
		t.Fatalf("untag mt/u: %d", code)
	}
	skipWindow(t, m, w)
	mustCollect(t, r, "mt/u")
	if _, err := pullVerify(ctx, r, "mt/s", ":new"); err != nil {
		t.Errorf("acknowledged image mt/s:new is broken: %v", err)
	}
}

// sharedLayerRig pushes images that all share one layer X.
type sharedLayerRig struct {
	t   *testing.T
	r   *registrytest.Registry
	raw storagedriver.StorageDriver
	x   digest.Digest
	xd  v1.Hash
	xl  v1.Layer
}

func newSharedLayerRig(t *testing.T, r *registrytest.Registry, raw storagedriver.StorageDriver) *sharedLayerRig {
	t.Helper()
	x, err := random.Layer(layerSize, types.OCILayer)
	if err != nil {
		t.Fatal(err)
	}
	xd, _ := x.Digest()
	return &sharedLayerRig{t: t, r: r, raw: raw, x: digest.Digest(xd.String()), xd: xd, xl: x}
}

// push pushes an image of X and a layer of its own as reference.
func (g *sharedLayerRig) push(reference string) v1.Image {
	g.t.Helper()
	other, err := random.Layer(layerSize, types.OCILayer)
	if err != nil {
		g.t.Fatal(err)
	}
	img := registrytest.Image(g.t, g.xl, other)
	rf, _ := ref(g.r, reference)
	if err := remote.Write(rf, img, remoteOpts(context.Background(), g.r)...); err != nil {
		g.t.Fatalf("push %s: %v", reference, err)
	}
	return img
}

// linked reports whether repo links X in storage.
func (g *sharedLayerRig) linked(repo string) bool {
	_, err := g.raw.Stat(context.Background(), layout.LayerLinkPath(repo, g.x))
	return err == nil
}

// mustCollect runs a real collect of repo through r; anything but a 200
// fails the test.
func mustCollect(t *testing.T, r *registrytest.Registry, repo string) *collectReport {
	t.Helper()
	rep, err := collectFull(context.Background(), r, repo)
	if err != nil || rep.code != http.StatusOK {
		t.Fatalf("collect %s: %v %+v", repo, err, rep)
	}
	return rep
}
