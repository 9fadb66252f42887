package collector

import (
	"context"
	"testing"

	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// A client racing the delete phase: between the plan and the fence.

// atFence runs do when the delete phase is about to fence o.
func (f *fixture) atFence(o reclaim.Object, do func()) {
	f.tr.OnFence = func(got reclaim.Object) {
		if got == o {
			do()
		}
	}
}

// run is one real run of repo (no dry run first: the race is in the delete phase).
func (f *fixture) run(repo string) *Report {
	f.T.Helper()
	rep, err := f.c.Collect(context.Background(), repo, RunOptions{})
	if err != nil {
		f.T.Fatal(err)
	}
	return rep
}

func TestAccessAtTheLastMomentWinsOverTheDeletePhase(t *testing.T) {
	f := newFixture(t)
	ix := f.Index("race", f.Image("race", nil, "child-layer"))
	// A client pulls the index by digest after the plan, just before GC
	// fences it: the index and (through it) its child must survive.
	o := reclaim.Object{Blob: ix.Digest, Repo: "race", Kind: reclaim.LinkManifest}
	f.atFence(o, func() { f.tr.Touch(o) })
	rep := f.run("race")
	if len(rep.ManifestsDeleted) != 0 || len(rep.LayersUnlinked) != 0 || len(rep.BlobsDeleted) != 0 {
		t.Fatalf("%s", summary(rep))
	}
	if reasonOf(rep, reclaim.KindManifest, ix.Digest) != reclaim.ReasonRecentlyAccessed {
		t.Fatalf("index: %s", reasonOf(rep, reclaim.KindManifest, ix.Digest))
	}
	checkOneDecisionEach(t, rep)
}

func TestRelinkUnderTheFenceKeepsBlob(t *testing.T) {
	f := newFixture(t)
	l := f.Layer("src", "mounted")
	// Another repository mounts the blob after the plan and before the
	// blob's fence (the mount touched the blob... but say the record was
	// lost): the re-list under the fence must see the new link.
	f.atFence(reclaim.Object{Blob: l.Digest}, func() { f.Put(layout.LayerLinkDir("dst", l.Digest)+"/link", []byte(l.Digest)) })
	rep := f.run("src")
	if reasonOf(rep, reclaim.KindBlob, l.Digest) != reclaim.ReasonLinkedElsewhere || !f.Exists(layout.BlobDataPath(l.Digest)) {
		t.Fatalf("%s", summary(rep))
	}
}

func TestTaggedAfterPlanIsKept(t *testing.T) {
	f := newFixture(t)
	img := f.Image("t", nil, "l")
	f.atFence(reclaim.Object{Blob: img.Digest, Repo: "t", Kind: reclaim.LinkManifest}, func() { f.Tag("t", "late", img.Digest) })
	rep := f.run("t")
	if reasonOf(rep, reclaim.KindManifest, img.Digest) != reclaim.ReasonTagged || len(rep.LayersUnlinked) != 0 {
		t.Fatalf("%s", summary(rep))
	}
}

func TestReferrerKeptWhenItsSubjectSurvivesTheDeletePhase(t *testing.T) {
	f := newFixture(t)
	subject := f.Image("s", nil, "subject-layer")
	sig := f.Image("s", &subject, "signature")
	// The subject is pulled by digest between the plan and its fence.
	o := reclaim.Object{Blob: subject.Digest, Repo: "s", Kind: reclaim.LinkManifest}
	f.atFence(o, func() { f.tr.Touch(o) })
	rep := f.run("s")
	if reasonOf(rep, reclaim.KindManifest, subject.Digest) != reclaim.ReasonRecentlyAccessed || reasonOf(rep, reclaim.KindManifest, sig.Digest) != reclaim.ReasonReferrer {
		t.Fatalf("%s", summary(rep))
	}
	if len(rep.LayersUnlinked) != 0 || len(rep.BlobsDeleted) != 0 {
		t.Fatalf("%s", summary(rep))
	}
	checkOneDecisionEach(t, rep)
}

// A fence that expires between being taken and the delete it guards (a
// slow storage, a paused process) may have let a writer through: nothing it
// guarded is deleted, and the report says why.
func TestExpiredFenceDeletesNothing(t *testing.T) {
	f := newFixture(t)
	img := f.Image("r", nil, "only-here") // untagged
	stray := f.Layer("r", "stray")        // a layer link no manifest references
	before := f.Tree()
	if _, err := f.c.Collect(context.Background(), "r", RunOptions{DryRun: true}); err != nil {
		t.Fatal(err)
	}
	if f.Tree() != before {
		t.Fatal("dry run changed storage")
	}
	f.tr.Expire = func(reclaim.Object) bool { return true }
	rep := f.run("r")
	if got := reasonOf(rep, reclaim.KindManifest, img.Digest); got != reclaim.ReasonFenceLost {
		t.Fatalf("manifest reason %v, want %v\n%s", got, reclaim.ReasonFenceLost, summary(rep))
	}
	// The manifest survives, so its layers are still referenced; the stray
	// link goes through its own fence, which expires too.
	if got := reasonOf(rep, reclaim.KindLayerLink, digest.FromString("only-here")); got != reclaim.ReasonReferenced {
		t.Fatalf("layer link reason %v, want %v\n%s", got, reclaim.ReasonReferenced, summary(rep))
	}
	if got := reasonOf(rep, reclaim.KindLayerLink, stray.Digest); got != reclaim.ReasonFenceLost {
		t.Fatalf("layer link reason %v, want %v\n%s", got, reclaim.ReasonFenceLost, summary(rep))
	}
	if f.Tree() != before {
		t.Fatalf("storage changed under expired fences\n%s", summary(rep))
	}
}

// A referrer's PUT writes its referrers index entry after its revision
// link: a snapshot taken between the two sees the referrer without its
// entry. When the run deletes the referrer (its subject went), the entry
// that landed meanwhile goes with it; left behind, it would list a referrer
// that no longer pulls.
func TestReferrerEntryWrittenAfterThePlanGoesWithIt(t *testing.T) {
	f := newFixture(t)
	subject := f.Image("s", nil, "subject-layer")
	sig := f.Image("s", &subject, "signature")
	entry := layout.ReferrerLinkPath("s", subject.Digest, sig.Digest)
	f.atFence(reclaim.Object{Blob: sig.Digest, Repo: "s", Kind: reclaim.LinkManifest}, func() { f.Put(entry, []byte(sig.Digest)) })
	rep := f.run("s")
	if reasonOf(rep, reclaim.KindManifest, sig.Digest) != reclaim.ReasonUnreferenced || reasonOf(rep, reclaim.KindManifest, subject.Digest) != reclaim.ReasonUnreferenced {
		t.Fatalf("%s", summary(rep))
	}
	if f.Exists(entry) {
		t.Fatalf("the referrers index still lists the deleted referrer %s", sig.Digest)
	}
	checkOneDecisionEach(t, rep)
}
