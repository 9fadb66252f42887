package collector

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/linkdb"
)

// withReverseLinks makes the fixture's collector read real reverse links
// (written for every forward link by writeReverseLinks) and repair
// through repair.
func withReverseLinks(repair LinkRepairer, unmark func(context.Context) error) func(*Config) {
	return func(c *Config) {
		c.Links = linkdb.NewReverseLinks(c.Driver)
		c.Repair = repair
		c.MarkLinkDBIncomplete = unmark
	}
}

func repairOf(rep *Report, d digest.Digest) (LinkRepair, bool) {
	for _, rp := range rep.ReverseLinksRepaired {
		if rp.Digest == d {
			return rp, true
		}
	}
	return LinkRepair{}, false
}

// A collect that lists the reverse links of a blob its repository links
// and finds its own missing writes it back (a dry run reports that it
// would, and changes nothing): the untagged manifest it keeps because it
// was pulled recently is protected again from collects of other
// repositories.
func TestCollectWritesBackItsMissingReverseLink(t *testing.T) {
	f := newFixture(t, func(c *Config) { withReverseLinks(linkdb.NewReverseLinks(c.Driver), nil)(c) })
	img := f.Image("k8s", nil, "pulled-by-digest")
	f.WriteReverseLinks()
	own := reclaim.RepoLink{Repo: "k8s", Kind: reclaim.LinkManifest}
	links := linkdb.NewReverseLinks(f.D)
	if err := links.Delete(context.Background(), img.Digest, own); err != nil {
		t.Fatal(err)
	}
	f.tr.Touch(reclaim.Object{Blob: img.Digest, Repo: "k8s", Kind: reclaim.LinkManifest})

	dry, err := f.c.Collect(context.Background(), "k8s", RunOptions{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if rp, ok := repairOf(dry, img.Digest); !ok || rp.Outcome != RepairWouldWrite || rp.Link != reclaim.LinkManifest {
		t.Fatalf("dry run: repairs %+v", dry.ReverseLinksRepaired)
	}
	if ok, _ := links.Has(context.Background(), img.Digest, own); ok {
		t.Fatal("a dry run wrote a reverse link")
	}
	rep := f.collect("k8s", RunOptions{})
	if rp, ok := repairOf(rep, img.Digest); !ok || rp.Outcome != RepairWritten {
		t.Fatalf("collect: repairs %+v", rep.ReverseLinksRepaired)
	}
	if reasonOf(rep, reclaim.KindManifest, img.Digest) != reclaim.ReasonRecentlyAccessed {
		t.Fatalf("%s", summary(rep))
	}
	if ok, err := links.Has(context.Background(), img.Digest, own); !ok || err != nil {
		t.Fatalf("reverse link after the collect: %v %v", ok, err)
	}
	// Nothing missing any more: the next collect repairs nothing.
	if again := f.collect("k8s", RunOptions{}); len(again.ReverseLinksRepaired) != 0 {
		t.Fatalf("second collect: repairs %+v", again.ReverseLinksRepaired)
	}
}

type failingPut struct{}

func (failingPut) Has(context.Context, digest.Digest, reclaim.RepoLink) (bool, error) {
	return false, nil
}

func (failingPut) Put(context.Context, digest.Digest, reclaim.RepoLink) error {
	return errors.New("storage says no")
}

// A hole the run cannot fill keeps its blob and marks the link database
// incomplete before anything is deleted: the rest of the run deletes no
// blob, and the report says why.
func TestCollectThatCannotRepairMarksLinkDBIncomplete(t *testing.T) {
	var unmarked int
	f := newFixture(t, withReverseLinks(failingPut{}, func(context.Context) error { unmarked++; return nil }))
	img := f.Image("k8s", nil, "layer-a", "layer-b")
	f.WriteReverseLinks()
	hole := digest.FromString("layer-a")
	if err := linkdb.NewReverseLinks(f.D).Delete(context.Background(), hole, reclaim.RepoLink{Repo: "k8s", Kind: reclaim.LinkLayer}); err != nil {
		t.Fatal(err)
	}
	f.tr.Now = f.tr.Now.Add(2 * time.Hour)

	rep, err := f.c.Collect(context.Background(), "k8s", RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if unmarked != 1 {
		t.Errorf("link database marked incomplete %d times, want once", unmarked)
	}
	if rp, ok := repairOf(rep, hole); !ok || rp.Outcome != RepairFailed {
		t.Errorf("repairs %+v", rep.ReverseLinksRepaired)
	}
	if len(rep.BlobsDeleted) != 0 || !f.Exists(layout.BlobDataPath(hole)) {
		t.Fatalf("blobs deleted after the database was marked incomplete: %s", summary(rep))
	}
	if reasonOf(rep, reclaim.KindBlob, hole) != reclaim.ReasonLinkDBIncomplete || reasonOf(rep, reclaim.KindBlob, img.Digest) != reclaim.ReasonLinkDBIncomplete {
		t.Errorf("hole kept as %s, manifest blob as %s", reasonOf(rep, reclaim.KindBlob, hole), reasonOf(rep, reclaim.KindBlob, img.Digest))
	}
	if len(rep.Errors) != 1 || rep.Errors[0].Digest != hole {
		t.Errorf("errors %+v, want the failed repair", rep.Errors)
	}
	blocked := false
	for _, b := range rep.Blockers {
		blocked = blocked || (b.Reason == reclaim.AbortLinkDBIncomplete && b.Blocks == BlocksBlobs)
	}
	if !blocked {
		t.Errorf("blockers %+v", rep.Blockers)
	}
}
