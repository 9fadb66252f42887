package middleware

import (
	"context"
	"testing"

	diststorage "github.com/distribution/distribution/v3/registry/storage"
	"github.com/distribution/reference"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// TestDescriptorKindFromCaller pins callerKind to Distribution's call sites:
// the wrapper built in Blobs() records the layer link, the one built in
// Manifests() the revision link. If this breaks, the wrapper still works
// (both kinds), at one extra Redis round trip per manifest PUT reference.
func TestDescriptorKindFromCaller(t *testing.T) {
	a := newTestApp(t, appOptions{})
	ctx := context.Background()
	for _, p := range []string{layout.LayerLinkPath("r", dA), layout.RevisionLinkPath("r", dB)} {
		c := layout.Classify(p)
		if err := a.env.Driver.PutContent(ctx, p, []byte(c.Digest)); err != nil {
			t.Fatal(err)
		}
		if err := a.env.Driver.PutContent(ctx, layout.BlobDataPath(c.Digest), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	reg, err := diststorage.NewRegistry(ctx, a.env.Driver, RegistryOption())
	if err != nil {
		t.Fatal(err)
	}
	named, _ := reference.WithName("r")
	repo, err := reg.Repository(ctx, named)
	if err != nil {
		t.Fatal(err)
	}
	rctx := context.WithValue(ctx, "vars.name", "r") //nolint:staticcheck // Distribution's own key
	if _, err := repo.Blobs(rctx).Stat(rctx, dA); err != nil {
		t.Fatal(err)
	}
	ms, err := repo.Manifests(rctx)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := ms.Exists(rctx, dB); err != nil || !ok {
		t.Fatalf("Exists = %v %v", ok, err)
	}
	for _, tc := range []struct {
		o    reclaim.Object
		want bool
	}{
		{reclaim.Object{Blob: dA, Repo: "r", Kind: reclaim.LinkLayer}, true},
		{reclaim.Object{Blob: dA, Repo: "r", Kind: reclaim.LinkManifest}, false},
		{reclaim.Object{Blob: dB, Repo: "r", Kind: reclaim.LinkManifest}, true},
		{reclaim.Object{Blob: dB, Repo: "r", Kind: reclaim.LinkLayer}, false},
	} {
		_, ok, err := a.env.Tracker.LastAccess(ctx, tc.o)
		if err != nil || ok != tc.want {
			t.Errorf("access record of %v = %v (%v), want %v", tc.o, ok, err, tc.want)
		}
	}
}
