package soak

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// TestFailedMountKeepsTargetTombstone is, end to end, the interleaving
// behind the soak's "manifest found, blob missing" (TestSoak/cache=inmemory,
// 10-minute run, before b0536d4): a cross-repository mount INTO a repository
// whose link to the blob GC deleted, from a source that does not have the
// blob either, cleared the target's deletion tombstone although the mount
// failed (202) and wrote no link. The instance's blob descriptor cache still
// said the target has the blob, and without the tombstone nothing checked
// it: HEAD answered 200, a client that trusts it skipped the upload, and the
// manifest PUT was accepted with no layer link behind it. Once the blob's
// other repository let go of it, GC deleted its data: an acknowledged,
// tagged image broken. storage's TestFailedMountKeepsTombstones forces the
// HEAD; this test follows it to the broken image, and shows the soak's link
// judge (judgeLinks) would catch it at the 201.
func TestFailedMountKeepsTargetTombstone(t *testing.T) {
	const w = time.Second
	m := miniredis.RunT(t)
	root, raw := prepareStorage(t)
	r := registrytest.Start(t, registrytest.WithRootDirectory(root),
		registrytest.WithStorageMiddleware("reclaim", map[string]any{
			"window": w.String(), "dedup": "10ms",
			"redis": map[string]any{"addrs": []any{m.Addr()}},
			"gc":    map[string]any{"enabled": true},
		}))
	ctx := context.Background()
	x, err := random.Layer(layerSize, types.OCILayer)
	if err != nil {
		t.Fatal(err)
	}
	xd, _ := x.Digest()
	image := func() (v1.Image, error) {
		other, err := random.Layer(layerSize, types.OCILayer)
		if err != nil {
			return nil, err
		}
		img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
		return mutate.AppendLayers(img, x, other)
	}
	push := func(reference string) v1.Image {
		t.Helper()
		img, err := image()
		if err != nil {
			t.Fatal(err)
		}
		rf, _ := ref(r, reference)
		if err := remote.Write(rf, img, remoteOpts(ctx, r)...); err != nil {
			t.Fatalf("push %s: %v", reference, err)
		}
		return img
	}
	linked := func(repo string) bool {
		_, err := raw.Stat(ctx, layout.LayerLinkPath(repo, digest.Digest(xd.String())))
		return err == nil
	}
	collectRepo := func(repo string) collectReport {
		t.Helper()
		resp := r.Do(t, http.MethodPost, "/gc/v1/repositories/"+repo+"/collect?dry_run=false", nil)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var rep collectReport
		if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &rep) != nil {
			t.Fatalf("collect %s: %d %s", repo, resp.StatusCode, b)
		}
		return rep
	}

	// X is in mt/s (whose image goes) and in mt/u (whose image stays); the
	// instance's descriptor cache learns "mt/s has X" from the upload.
	s := push("mt/s:gone")
	push("mt/u:keep")
	sd, _ := s.Digest()
	if code := del(ctx, r, "/v2/mt/s/manifests/"+sd.String()); code != http.StatusAccepted {
		t.Fatalf("delete mt/s manifest: %d", code)
	}
	time.Sleep(w + 500*time.Millisecond) // nobody touched mt/s's objects for W
	rep := collectRepo("mt/s")
	if !slices.Contains(rep.LayersUnlinked, digest.Digest(xd.String())) || linked("mt/s") {
		t.Fatalf("the collect did not unlink X from mt/s: %+v", rep)
	}

	// A mount of X into mt/s from a repository without X: refused (202),
	// nothing written. The cache entry "mt/s has X" is stale and its
	// tombstone is what makes the next Stat look at the storage.
	if code := mount(ctx, r, "mt/none", "mt/s", xd); code != http.StatusAccepted {
		t.Fatalf("mount from a repository without the blob: %d, want 202", code)
	}
	if linked("mt/s") {
		t.Fatal("the refused mount linked X into mt/s")
	}
	if code := headBlob(ctx, r, "mt/s", xd).code; code != http.StatusNotFound {
		t.Errorf("HEAD mt/s/blobs/X after GC unlinked it and a mount into mt/s failed = %d, want 404", code)
	}

	// A client that trusts HEAD pushes an image with X into mt/s.
	img := push("mt/s:new")
	if !linked("mt/s") {
		t.Errorf("manifest PUT into mt/s acknowledged (201) with no layer link of X in mt/s")
	}
	// what the soak's judge (judgeLinks) says about it
	nd, _ := img.Digest()
	wl := &workload{c: &cluster{raw: raw}}
	if missing, err := wl.unlinked(ctx, "mt/s", digest.Digest(nd.String()), 0); err != nil || len(missing) > 0 {
		t.Errorf("soak judge: mt/s@%s does not link %v (%v)", nd, missing, err)
	}
	// mt/u lets go of X; GC deletes it (no reverse link is left).
	if code := del(ctx, r, "/v2/mt/u/manifests/keep"); code != http.StatusAccepted {
		t.Fatalf("untag mt/u: %d", code)
	}
	time.Sleep(w + 500*time.Millisecond)
	collectRepo("mt/u")
	if _, err := pullVerify(ctx, r, "mt/s", ":new"); err != nil {
		t.Errorf("acknowledged image mt/s:new is broken: %v", err)
	}
}
