package reclaimer

import (
	"context"
	"sync"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/gc/collector"
	"github.com/reclaim-registry/reclaim/gc/internal/gctest"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/linkdb"
)

// memCursor is a ScrubCursor in memory.
type memCursor struct {
	mu  sync.Mutex
	at  string
	set int
}

func (c *memCursor) ScrubCursor(context.Context) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at, nil
}

func (c *memCursor) SetScrubCursor(_ context.Context, at string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at, c.set = at, c.set+1
	return nil
}

// scrubFixture is three repositories a, b, c (one image each, sharing a
// base layer) with their reverse links, and holes punched in a and c.
func scrubFixture(t *testing.T, repair collector.LinkRepairer, unmark func(context.Context) error) (*fixture, []reclaim.RepoLink, []digest.Digest) {
	t.Helper()
	f := newFixture(t, func(c *collector.Config) {
		if repair == nil {
			repair = linkdb.NewReverseLinks(c.Driver)
		}
		c.Links = linkdb.NewReverseLinks(c.Driver)
		c.Repair = repair
		c.MarkLinkDBIncomplete = unmark
	})
	var holes []reclaim.RepoLink
	var blobs []digest.Digest
	for _, repo := range []string{"a", "b", "c"} {
		img := f.Image(repo, nil, "base", repo+" own layer")
		f.Tag(repo, "v1", img.Digest)
		if repo != "b" {
			holes = append(holes, reclaim.RepoLink{Repo: repo, Kind: reclaim.LinkLayer}, reclaim.RepoLink{Repo: repo, Kind: reclaim.LinkManifest})
			blobs = append(blobs, digest.FromString("base"), img.Digest)
		}
	}
	f.WriteReverseLinks()
	links := linkdb.NewReverseLinks(f.D)
	for i, h := range holes {
		if err := links.Delete(context.Background(), blobs[i], h); err != nil {
			t.Fatal(err)
		}
	}
	return f, holes, blobs
}

// TestScrubWritesBackMissingReverseLinks: each tick scrubs ScrubRepos
// repositories from the shared cursor on, writes back every reverse link
// their forward links lack, and starts again at the end of the catalog.
func TestScrubWritesBackMissingReverseLinks(t *testing.T) {
	f, holes, blobs := scrubFixture(t, nil, nil)
	cur := &memCursor{}
	r, err := f.reclaimer(gctest.NewQueue(f.tr.Clock), Config{Enabled: true, UsageRefresh: -1,
		ScrubRepos: 2, ScrubCursor: cur, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	links := linkdb.NewReverseLinks(f.D)
	present := func(i int) bool {
		ok, err := links.Has(ctx, blobs[i], holes[i])
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}

	rep := r.Tick(ctx)
	// a: base, a's own layer, a's config, the manifest; b: the same
	if s := rep.Scrub; s.Repositories != 2 || s.Links != 8 || s.Repaired != 2 || s.Failed != 0 || cur.at != "b" {
		t.Fatalf("tick 1: %+v, cursor %q", s, cur.at)
	}
	if !present(0) || !present(1) || present(2) || present(3) {
		t.Fatal("tick 1 did not repair exactly a's holes")
	}
	rep = r.Tick(ctx)
	if s := rep.Scrub; s.Repositories != 1 || s.Repaired != 2 || cur.at != "" {
		t.Fatalf("tick 2: %+v, cursor %q (want the end of the catalog: back to the start)", s, cur.at)
	}
	if !present(2) || !present(3) {
		t.Fatal("tick 2 did not repair c's holes")
	}
	rep = r.Tick(ctx) // a and b again: nothing missing
	if s := rep.Scrub; s.Repositories != 2 || s.Repaired != 0 {
		t.Fatalf("tick 3: %+v", s)
	}
	if st := r.Status(ctx); st.ScrubRepositories != 5 || st.ScrubRepaired != 4 || st.ScrubRepos != 2 {
		t.Fatalf("status %+v", st)
	}

	off, err := f.reclaimer(gctest.NewQueue(f.tr.Clock), Config{Enabled: true, UsageRefresh: -1, ScrubRepos: -1, ScrubCursor: cur})
	if err != nil {
		t.Fatal(err)
	}
	if rep := off.Tick(ctx); rep.Scrub != (ScrubReport{}) || off.Status(ctx).ScrubRepos != 0 {
		t.Fatalf("scrub off: %+v", rep.Scrub)
	}
}

// unreadableFor fails Has for one blob, and every Put.
type unreadableFor struct {
	*linkdb.ReverseLinks
	blob digest.Digest
}

func (u unreadableFor) Has(ctx context.Context, d digest.Digest, l reclaim.RepoLink) (bool, error) {
	if d == u.blob {
		return false, context.DeadlineExceeded
	}
	return u.ReverseLinks.Has(ctx, d, l)
}

func (u unreadableFor) Put(context.Context, digest.Digest, reclaim.RepoLink) error {
	return context.DeadlineExceeded
}

// TestScrubThatCannotRepairMarksLinkDBIncomplete: a reverse link that
// cannot be read is counted and the scrub goes on; a missing one that
// cannot be written marks the link database incomplete, once.
func TestScrubThatCannotRepairMarksLinkDBIncomplete(t *testing.T) {
	var unmarked int
	repair := unreadableFor{blob: digest.FromString("a own layer")}
	f, _, _ := scrubFixture(t, repair, func(context.Context) error { unmarked++; return nil })
	repair.ReverseLinks = linkdb.NewReverseLinks(f.D)
	f.cfg.Repair = repair
	r, err := f.reclaimer(gctest.NewQueue(f.tr.Clock), Config{Enabled: true, UsageRefresh: -1,
		ScrubRepos: 1, ScrubCursor: &memCursor{}, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	rep := r.Tick(context.Background())
	// a: the unreadable link and the two holes that could not be written
	if s := rep.Scrub; s.Repositories != 1 || s.Links != 4 || s.Repaired != 0 || s.Failed != 3 || !s.Unmarked || unmarked != 1 {
		t.Fatalf("scrub %+v, marked incomplete %d times", s, unmarked)
	}
	if !r.Status(context.Background()).ScrubMarkedLinkDB {
		t.Fatal("status does not say the scrub marked the link database incomplete")
	}
	if !f.Exists(layout.BlobDataPath(digest.FromString("base"))) {
		t.Fatal("the base layer is gone")
	}
}
