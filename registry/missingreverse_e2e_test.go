package registry_test

import (
	"os"
	"path/filepath"
	"testing"

	ggcrv1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/gc/collector"
	"github.com/reclaim-registry/reclaim/gc/reclaimer"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/linkdb"
)

// missingReverse sets up issue 25's finding 2 through the real HTTP stack:
// cor/b:v1 and cor/c:v1 share a layer; cor/b's reverse link for it is
// deleted on disk (by hand, a bad restore, a partial copy) while the link
// database stays marked complete; cor/c:v1 is then moved to an image
// without the layer, so a collect of cor/c unlinks it and, with no other
// reverse link left, would delete the blob cor/b still uses. It returns
// the shared layer's digest, everything older than the window.
func missingReverse(t *testing.T, g *gcRegistry) ggcrv1.Hash {
	t.Helper()
	shared := layer(t)
	push(t, g, "cor/b:v1", registrytest.Image(t, shared, layer(t)))
	push(t, g, "cor/c:v1", registrytest.Image(t, shared, layer(t)))
	d := digest.Digest(digestOf(t, shared).String())
	rl := filepath.Join(g.Root, layout.ReverseLinkPath(d, "cor/b", reclaim.LinkLayer))
	if err := os.Remove(rl); err != nil {
		t.Fatalf("delete cor/b's reverse link: %v", err)
	}
	push(t, g, "cor/c:v1", registrytest.Image(t, layer(t))) // the old cor/c:v1 is untagged
	g.settle(t)
	return digestOf(t, shared)
}

// TestE2EMissingReverseLinkScrubbedByReclaimerTick: a reclaimer tick,
// with the default settings, scrubs cor/b (the catalog holds two
// repositories, the default scrubs two a tick) and writes the reverse link
// back; the collect of cor/c then keeps the layer as linked elsewhere.
// Before the scrub (issue 25), the collect deleted it and cor/b:v1 no
// longer pulled.
func TestE2EMissingReverseLinkScrubbedByReclaimerTick(t *testing.T) {
	g := startGC(t)
	shared := missingReverse(t, g)
	rc, err := g.Server.NewReclaimer(true)
	if err != nil {
		t.Fatal(err)
	}
	tick := rc.Tick(t.Context())
	if tick.Scrub.Repositories != 2 || tick.Scrub.Repaired != 1 || tick.Scrub.Failed != 0 {
		t.Errorf("tick's scrub: %+v, want 2 repositories, 1 reverse link written back", tick.Scrub)
	}
	if st := rc.Status(t.Context()); st.ScrubRepaired != 1 || st.ScrubRepos != reclaimer.DefaultScrubRepos {
		t.Errorf("status: scrub_repaired %d, scrub_repos %d", st.ScrubRepaired, st.ScrubRepos)
	}
	rep := g.collect(t, "cor/c")
	if contains(rep.BlobsDeleted, shared) {
		t.Fatalf("the collect of cor/c deleted the layer cor/b:v1 uses; kept: %+v", rep.Kept)
	}
	if r := reasonOf(rep, reclaim.KindBlob, shared); r != reclaim.ReasonLinkedElsewhere.String() {
		t.Errorf("shared layer kept as %q, want linked_elsewhere", r)
	}
	registrytest.AssertPullable(t, g.Registry, "cor/b:v1")
	registrytest.AssertPullable(t, g.Registry, "cor/c:v1")
}

// TestE2EMissingReverseLinkFoundByVerify: the finding's own sequence. A
// plain `linkdb verify` reports missing_reverse; from then on no collect
// may delete a blob on the strength of the incomplete database: the dry
// run of cor/c lists the blocker, the collect keeps the layer, and after
// the rebuild verify tells the operator to run, the layer is kept as
// linked elsewhere and every link verifies. Before issue 25, verify only
// reported, the dry run showed no blocker and the collect deleted the
// layer cor/b:v1 still uses.
func TestE2EMissingReverseLinkFoundByVerify(t *testing.T) {
	g := startGC(t)
	shared := missingReverse(t, g)
	v, err := linkdb.Verify(t.Context(), g.raw, linkdb.VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v.Counts[linkdb.MissingReverse] != 1 {
		t.Fatalf("verify: %+v, want one missing_reverse", v.Counts)
	}
	code, body := g.collectRaw(t, "cor/c", true)
	if code != 200 {
		t.Fatalf("dry run: %d %s", code, body)
	}
	if dry := decodeReport(t, body); !hasBlocker(dry, string(reclaim.AbortLinkDBIncomplete), collector.BlocksBlobs) {
		t.Errorf("dry run after verify found missing_reverse: blockers %+v, want linkdb_incomplete", dry.Blockers)
	}
	code, body = g.collectRaw(t, "cor/c", false)
	if code != 200 {
		t.Fatalf("collect: %d %s", code, body)
	}
	if rep := decodeReport(t, body); contains(rep.BlobsDeleted, shared) {
		t.Fatalf("the collect of cor/c deleted the layer cor/b:v1 uses")
	}
	registrytest.AssertPullable(t, g.Registry, "cor/b:v1")

	if _, err := linkdb.Rebuild(t.Context(), g.raw, linkdb.RebuildOptions{}); err != nil {
		t.Fatalf("rebuild: %v", err)
	}
	// The collect unlinked the layer from cor/c and queued it; the
	// reclaimer's review of it, with the database whole again, keeps it.
	rc, err := g.Server.NewReclaimer(true)
	if err != nil {
		t.Fatal(err)
	}
	dec, err := rc.Review(t.Context(), digest.Digest(shared.String()))
	if err != nil || dec.Reason != reclaim.ReasonLinkedElsewhere {
		t.Errorf("review of the shared layer after the rebuild: %+v %v, want linked_elsewhere", dec, err)
	}
	g.checkLinks(t)
	registrytest.AssertPullable(t, g.Registry, "cor/b:v1")
}
