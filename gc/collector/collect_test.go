package collector

import (
	"context"
	"fmt"
	"path"
	"sync"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/reclaim-registry/reclaim/gc/internal/gctest"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

func TestTagOverwriteFreesOldUniqueLayers(t *testing.T) {
	f := newFixture(t)
	old := f.Image("team/app", nil, "base", "old-only")
	f.Tag("team/app", "latest", old.Digest)
	cur := f.Image("team/app", nil, "base", "new-only")
	f.Tag("team/app", "latest", cur.Digest) // overwrite

	rep := f.collect("team/app", RunOptions{})
	oldOnly := digest.FromString("old-only")
	if !has(rep.ManifestsDeleted, old.Digest) || has(rep.ManifestsDeleted, cur.Digest) {
		t.Fatalf("manifests deleted: %v", rep.ManifestsDeleted)
	}
	if !has(rep.LayersUnlinked, oldOnly) || has(rep.LayersUnlinked, digest.FromString("base")) {
		t.Fatalf("layers unlinked: %v", rep.LayersUnlinked)
	}
	if !has(rep.BlobsDeleted, oldOnly) || !has(rep.BlobsDeleted, old.Digest) {
		t.Fatalf("blobs deleted: %v", rep.BlobsDeleted)
	}
	if want := int64(len("old-only") + len("config of base,old-only") + int(old.Size)); rep.BytesFreed != want {
		t.Fatalf("bytes freed %d, want %d", rep.BytesFreed, want)
	}
	if f.Exists(layout.BlobDataPath(oldOnly)) || !f.Exists(layout.BlobDataPath(digest.FromString("base"))) {
		t.Fatal("wrong blobs in storage")
	}
	if f.Exists(path.Dir(layout.TagIndexPath("team/app", "latest", old.Digest)) + "/link") {
		t.Fatal("tag history of the deleted manifest left behind")
	}
	if r := reasonOf(rep, reclaim.KindManifest, cur.Digest); r != reclaim.ReasonTagged {
		t.Fatalf("current manifest reason %s", r)
	}
	// A second run finds nothing left to do.
	again := f.collect("team/app", RunOptions{})
	if len(again.ManifestsDeleted)+len(again.LayersUnlinked)+len(again.BlobsDeleted) != 0 {
		t.Fatalf("second run deleted %s", summary(again))
	}
}

func TestSharedBlobNeverDeletedWhileLinkedElsewhere(t *testing.T) {
	f := newFixture(t)
	a := f.Image("a", nil, "shared-base", "a-only")
	f.Tag("a", "v1", a.Digest)
	b := f.Image("b/c", nil, "shared-base", "b-only")
	f.Tag("b/c", "v1", b.Digest)
	f.Untag("a", "v1")

	rep := f.collect("a", RunOptions{})
	base := digest.FromString("shared-base")
	if !has(rep.LayersUnlinked, base) {
		t.Fatalf("a's link to the base should go: %v", rep.LayersUnlinked)
	}
	if has(rep.BlobsDeleted, base) || reasonOf(rep, reclaim.KindBlob, base) != reclaim.ReasonLinkedElsewhere {
		t.Fatalf("base blob: %s", reasonOf(rep, reclaim.KindBlob, base))
	}
	if !has(rep.BlobsDeleted, digest.FromString("a-only")) {
		t.Fatalf("a-only should be deleted: %v", rep.BlobsDeleted)
	}
	if !f.Exists(layout.BlobDataPath(base)) || !f.Exists(layout.LayerLinkDir("b/c", base)+"/link") {
		t.Fatal("b/c lost its base layer")
	}
}

func TestIndexChildrenAndReferrersFollowTheirRoot(t *testing.T) {
	f := newFixture(t)
	amd := f.Image("multi", nil, "amd64")
	arm := f.Image("multi", nil, "arm64")
	ix := f.Index("multi", amd, arm)
	sig := f.Image("multi", &ix, "signature")
	sbom := f.Image("multi", &sig, "sbom-of-signature") // referrer of a referrer
	f.Tag("multi", "v1", ix.Digest)

	rep := f.collect("multi", RunOptions{})
	if len(rep.ManifestsDeleted) != 0 || len(rep.LayersUnlinked) != 0 {
		t.Fatalf("nothing should go while tagged: %s", summary(rep))
	}
	for d, want := range map[digest.Digest]reclaim.Reason{ix.Digest: reclaim.ReasonTagged, amd.Digest: reclaim.ReasonIndexChild, arm.Digest: reclaim.ReasonIndexChild,
		sig.Digest: reclaim.ReasonReferrer, sbom.Digest: reclaim.ReasonReferrer} {
		if got := reasonOf(rep, reclaim.KindManifest, d); got != want {
			t.Errorf("%s: %s, want %s", d, got, want)
		}
	}

	f.Untag("multi", "v1")
	rep = f.collect("multi", RunOptions{})
	for _, d := range []digest.Digest{ix.Digest, amd.Digest, arm.Digest, sig.Digest, sbom.Digest} {
		if !has(rep.ManifestsDeleted, d) {
			t.Errorf("%s not deleted: %s", d, reasonOf(rep, reclaim.KindManifest, d))
		}
	}
	if len(rep.LayersUnlinked) != 8 { // 4 images x (config + 1 layer)
		t.Errorf("layers unlinked: %d", len(rep.LayersUnlinked))
	}
	// Parents go first: the index before its children.
	pos := map[digest.Digest]int{}
	for i, d := range rep.ManifestsDeleted {
		pos[d] = i
	}
	if pos[ix.Digest] > pos[amd.Digest] || pos[ix.Digest] > pos[arm.Digest] {
		t.Errorf("index deleted after a child: %v", rep.ManifestsDeleted)
	}
}

func TestReferrersFallbackTagKeepsItsIndex(t *testing.T) {
	f := newFixture(t)
	img := f.Image("r", nil, "img")
	sig := f.Image("r", nil, "sig") // no subject: referrers via the tag scheme
	fallback := f.Index("r", sig)
	f.Tag("r", "sha256-"+img.Digest.Encoded(), fallback.Digest)
	rep := f.collect("r", RunOptions{})
	if reasonOf(rep, reclaim.KindManifest, sig.Digest) != reclaim.ReasonIndexChild || reasonOf(rep, reclaim.KindManifest, fallback.Digest) != reclaim.ReasonTagged {
		t.Fatalf("fallback tag: %s", summary(rep))
	}
	if !has(rep.ManifestsDeleted, img.Digest) {
		t.Fatal("untagged image should go")
	}
}

func TestRecentlyAccessedUntaggedManifestKept(t *testing.T) {
	f := newFixture(t)
	img := f.Image("k8s", nil, "pulled-by-digest")
	f.tr.Touch(reclaim.Object{Blob: img.Digest, Repo: "k8s", Kind: reclaim.LinkManifest})
	rep := f.collect("k8s", RunOptions{})
	if reasonOf(rep, reclaim.KindManifest, img.Digest) != reclaim.ReasonRecentlyAccessed {
		t.Fatalf("reason %s", reasonOf(rep, reclaim.KindManifest, img.Digest))
	}
	if len(rep.LayersUnlinked) != 0 || len(rep.BlobsDeleted) != 0 {
		t.Fatalf("a kept manifest's layers must stay: %s", summary(rep))
	}
	// Once the window has passed, it goes.
	f.tr.Now = f.tr.Now.Add(2 * time.Hour)
	rep = f.collect("k8s", RunOptions{})
	if !has(rep.ManifestsDeleted, img.Digest) || len(rep.BlobsDeleted) != 3 {
		t.Fatalf("after the window: %s", summary(rep))
	}
}

func TestRecentLayerLinkOfPushInProgressKept(t *testing.T) {
	f := newFixture(t)
	l := f.Layer("p", "uploaded-before-manifest")
	f.tr.Touch(reclaim.Object{Blob: l.Digest, Repo: "p", Kind: reclaim.LinkLayer})
	stale := f.Layer("p", "stale")
	rep := f.collect("p", RunOptions{})
	if reasonOf(rep, reclaim.KindLayerLink, l.Digest) != reclaim.ReasonRecentlyAccessed || !has(rep.LayersUnlinked, stale.Digest) {
		t.Fatalf("%s", summary(rep))
	}
}

func TestBlobAccessedElsewhereKept(t *testing.T) {
	f := newFixture(t)
	l := f.Layer("p", "hot")
	f.tr.Touch(reclaim.Object{Blob: l.Digest}) // pulled through another repository
	rep := f.collect("p", RunOptions{})
	if !has(rep.LayersUnlinked, l.Digest) || reasonOf(rep, reclaim.KindBlob, l.Digest) != reclaim.ReasonRecentlyAccessed {
		t.Fatalf("%s", summary(rep))
	}
}

func TestKeepUntaggedPolicyAndPins(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Pinner = pinSet{digest.FromString("x")} })
	img := f.Image("p", nil, "l")
	keep := true
	rep := f.collect("p", RunOptions{KeepUntagged: &keep})
	if reasonOf(rep, reclaim.KindManifest, img.Digest) != reclaim.ReasonPolicyKeepUntagged || len(rep.LayersUnlinked) != 0 {
		t.Fatalf("%s", summary(rep))
	}
	f2 := newFixture(t)
	img2 := f2.Image("p", nil, "l")
	f2.c.pinner = pinSet{img2.Digest}
	rep = f2.collect("p", RunOptions{})
	if reasonOf(rep, reclaim.KindManifest, img2.Digest) != reclaim.ReasonPinned || len(rep.LayersUnlinked) != 0 {
		t.Fatalf("%s", summary(rep))
	}
}

type pinSet []digest.Digest

// latePins pins what the test adds after the facts were read; failing
// makes every read fail.
type latePins struct {
	mu      sync.Mutex
	pinned  map[digest.Digest]bool
	failing bool
}

func (p *latePins) pin(d digest.Digest) { p.mu.Lock(); defer p.mu.Unlock(); p.pinned[d] = true }

func (p *latePins) Pinned(_ context.Context, _ string, d digest.Digest) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failing {
		return false, gctest.ErrBoom
	}
	return p.pinned[d], nil
}

// A pin stored after the plan, even after the manifest's fence was taken,
// keeps it: the delete phase re-checks pins under the fence, right before the
// delete. A pin check that fails keeps the manifest too.
func TestPinAfterTheFenceKeepsTheManifest(t *testing.T) {
	pins := &latePins{pinned: map[digest.Digest]bool{}}
	f := newFixture(t, func(c *Config) { c.Pinner = pins })
	img := f.Image("p", nil, "l")
	f.tr.OnFence = func(o reclaim.Object) {
		if o.Blob == img.Digest && o.Kind == reclaim.LinkManifest {
			pins.pin(img.Digest)
		}
	}
	rep, err := f.c.Collect(context.Background(), "p", RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if dec := decisionOf(rep, reclaim.KindManifest, img.Digest); dec.Reason != reclaim.ReasonPinned || dec.Detail != "pinned since the plan" ||
		len(rep.LayersUnlinked) != 0 || !f.Exists(layout.RevisionDir("p", img.Digest)+"/link") {
		t.Fatalf("%s", summary(rep))
	}

	pins2 := &latePins{pinned: map[digest.Digest]bool{}}
	f2 := newFixture(t, func(c *Config) { c.Pinner = pins2 })
	img2 := f2.Image("p", nil, "l")
	f2.tr.OnFence = func(reclaim.Object) { pins2.mu.Lock(); pins2.failing = true; pins2.mu.Unlock() }
	rep, err = f2.c.Collect(context.Background(), "p", RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if dec := decisionOf(rep, reclaim.KindManifest, img2.Digest); dec.Reason != reclaim.ReasonCheckFailed || !f2.Exists(layout.RevisionDir("p", img2.Digest)+"/link") {
		t.Fatalf("%s", summary(rep))
	}
}

func (p pinSet) Pinned(_ context.Context, _ string, d digest.Digest) (bool, error) {
	return has(p, d), nil
}

func TestCapKeepsNewestAndWhatTheyReference(t *testing.T) {
	f := newFixture(t)
	var imgs []v1.Descriptor
	for i := range 3 {
		img := f.Image("c", nil, fmt.Sprint("layer", i))
		// Older images were last accessed earlier (outside the window).
		f.tr.Access[reclaim.Object{Blob: img.Digest, Repo: "c", Kind: reclaim.LinkManifest}] = gctest.T0.Add(time.Duration(i) * time.Hour)
		imgs = append(imgs, img)
	}
	rep := f.collect("c", RunOptions{Cap: 2})
	// Budget 2: the two oldest manifests; their layer links wait.
	if !sameDigests(rep.ManifestsDeleted, []digest.Digest{imgs[0].Digest, imgs[1].Digest}) {
		t.Fatalf("cap: %s", summary(rep))
	}
	if reasonOf(rep, reclaim.KindManifest, imgs[2].Digest) != reclaim.ReasonCapped {
		t.Fatalf("newest: %s", reasonOf(rep, reclaim.KindManifest, imgs[2].Digest))
	}
	if len(rep.LayersUnlinked) != 0 || reasonOf(rep, reclaim.KindLayerLink, digest.FromString("layer0")) != reclaim.ReasonCapped {
		t.Fatalf("layers: %v", rep.LayersUnlinked)
	}
	// Nothing the capped manifest references was unlinked.
	for _, l := range rep.LayersUnlinked {
		if l == digest.FromString("layer2") || l == digest.FromString("config of layer2") {
			t.Fatalf("unlinked a layer of a capped manifest: %s", l)
		}
	}
	if reasonOf(rep, reclaim.KindLayerLink, digest.FromString("layer2")) != reclaim.ReasonReferenced {
		t.Fatal("capped manifest's layer should be kept as referenced")
	}
}

func TestUnknownMediaTypeKeepsTheRepository(t *testing.T) {
	f := newFixture(t)
	img := f.Image("u", nil, "l")
	weird := f.RawManifest("u", []byte(`{"schemaVersion":1,"name":"u","tag":"old","fsLayers":[{"blobSum":"`+digest.FromString("l").String()+`"}]}`))
	rep := f.collect("u", RunOptions{})
	if reasonOf(rep, reclaim.KindManifest, weird) != reclaim.ReasonUnknownMediaType || reasonOf(rep, reclaim.KindManifest, img.Digest) != reclaim.ReasonUnknownManifestKept {
		t.Fatalf("%s", summary(rep))
	}
	if len(rep.LayersUnlinked) != 0 || len(rep.BlobsDeleted) != 0 {
		t.Fatalf("%s", summary(rep))
	}
}

func TestFailingDeleteIsReportedAndSkipped(t *testing.T) {
	f := newFixture(t)
	a := f.Layer("f", "a")
	b := f.Layer("f", "b")
	f.c.driver = gctest.FailingDelete{StorageDriver: f.D, Path: layout.LayerLinkDir("f", a.Digest)}
	rep, err := f.c.Collect(context.Background(), "f", RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if reasonOf(rep, reclaim.KindLayerLink, a.Digest) != reclaim.ReasonDeleteFailed || !has(rep.LayersUnlinked, b.Digest) || len(rep.Errors) != 1 {
		t.Fatalf("%s errors=%v", summary(rep), rep.Errors)
	}
}
