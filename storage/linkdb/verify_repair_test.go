package linkdb

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// rebuilt is a small generated registry after a rebuild (marker written),
// with one layer link's reverse link deleted behind the middleware's back.
func rebuilt(t *testing.T, d storagedriver.StorageDriver) (repo string, blob digest.Digest) {
	t.Helper()
	ctx := context.Background()
	generate(t, d, small)
	if _, err := Rebuild(ctx, d, RebuildOptions{}); err != nil {
		t.Fatal(err)
	}
	err := d.Walk(ctx, layout.RepositoriesRoot, func(fi storagedriver.FileInfo) error {
		if p := layout.Classify(fi.Path()); p.Kind == layout.PathLayerLink && repo == "" {
			repo, blob = p.Repo, p.Digest
			return storagedriver.ErrFilledBuffer
		}
		return nil
	})
	if err != nil && !errors.Is(err, storagedriver.ErrFilledBuffer) {
		t.Fatal(err)
	}
	if err := NewReverseLinks(d).Delete(ctx, blob, reclaim.RepoLink{Repo: repo, Kind: reclaim.LinkLayer}); err != nil {
		t.Fatal(err)
	}
	return repo, blob
}

func marked(t *testing.T, d storagedriver.StorageDriver) bool {
	t.Helper()
	_, ok, err := LinkDBComplete(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

func TestVerifyMissingReverseRemovesMarker(t *testing.T) {
	d := inmemory.New()
	rebuilt(t, d)
	rep := verify(t, d)
	if rep.Counts[MissingReverse] != 1 || !rep.MarkerRemoved || rep.ExitCode != ExitDataLoss {
		t.Fatalf("verify: counts %v, marker removed %v, exit %d", rep.Counts, rep.MarkerRemoved, rep.ExitCode)
	}
	if marked(t, d) {
		t.Fatal("the marker survived a verify that found a forward link without its reverse link")
	}
	var b bytes.Buffer
	if err := rep.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"marker: REMOVED", "registry linkdb verify --repair"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "then verify again") {
		t.Errorf("summary sends the operator round in a circle:\n%s", out)
	}
}

func TestVerifyRepairWritesMissingReverse(t *testing.T) {
	for _, markerBefore := range []bool{true, false} {
		name := map[bool]string{true: "marker present", false: "marker removed"}[markerBefore]
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			d := inmemory.New()
			repo, blob := rebuilt(t, d)
			if !markerBefore {
				if err := MarkLinkDBIncomplete(ctx, d); err != nil {
					t.Fatal(err)
				}
			}
			rep, err := Verify(ctx, d, VerifyOptions{Repair: true})
			if err != nil {
				t.Fatal(err)
			}
			if rep.ReverseRepaired != 1 || rep.Counts[MissingReverse] != 0 || rep.ExitCode != ExitClean || rep.MarkerRemoved {
				t.Fatalf("verify --repair: repaired %d, counts %v, exit %d, marker removed %v", rep.ReverseRepaired, rep.Counts, rep.ExitCode, rep.MarkerRemoved)
			}
			if rep.MarkerWritten == markerBefore || !marked(t, d) {
				t.Errorf("marker written %v (there before: %v); marked now %v", rep.MarkerWritten, markerBefore, marked(t, d))
			}
			if ok, err := NewReverseLinks(d).Has(ctx, blob, reclaim.RepoLink{Repo: repo, Kind: reclaim.LinkLayer}); !ok || err != nil {
				t.Errorf("reverse link after --repair: %v %v", ok, err)
			}
			if again := verify(t, d); again.ExitCode != ExitClean {
				t.Errorf("verify after --repair: exit %d %v", again.ExitCode, again.Counts)
			}
		})
	}
}

// A --repair whose repositories phase found anything else wrong leaves an
// absent marker absent: only a clean walk establishes what a rebuild does.
func TestVerifyRepairDoesNotMarkOverDamage(t *testing.T) {
	ctx := context.Background()
	d := inmemory.New()
	rebuilt(t, d)
	if err := MarkLinkDBIncomplete(ctx, d); err != nil {
		t.Fatal(err)
	}
	bad := layout.LayerLinkPath("corrupt/repo", digest.FromString("x"))
	if err := d.PutContent(ctx, bad, []byte("not a digest")); err != nil {
		t.Fatal(err)
	}
	rep, err := Verify(ctx, d, VerifyOptions{Repair: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.ReverseRepaired < 1 || rep.Counts[Corrupt] == 0 || rep.MarkerWritten || marked(t, d) {
		t.Fatalf("repaired %d, counts %v, marker written %v", rep.ReverseRepaired, rep.Counts, rep.MarkerWritten)
	}
}

// putFails fails every write of a reverse link.
type putFails struct{ storagedriver.StorageDriver }

func (p putFails) PutContent(ctx context.Context, path string, b []byte) error {
	if layout.Classify(path).Kind == layout.PathReverseLink {
		return errDenied
	}
	return p.StorageDriver.PutContent(ctx, path, b)
}

func TestVerifyRepairThatFailsRemovesMarker(t *testing.T) {
	mem := inmemory.New()
	rebuilt(t, mem)
	rep, err := Verify(context.Background(), putFails{mem}, VerifyOptions{Repair: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Counts[MissingReverse] != 1 || !rep.MarkerRemoved || marked(t, mem) {
		t.Fatalf("counts %v, marker removed %v", rep.Counts, rep.MarkerRemoved)
	}
	if f := rep.Findings[0]; f.Kind != MissingReverse || !strings.Contains(f.Detail, "repair failed") {
		t.Errorf("finding %+v", f)
	}
}

// unlinkOnLook deletes the forward link of (repo, blob) when verify looks
// at its reverse link: the middleware's delete order, forward then
// reverse, caught in between.
type unlinkOnLook struct {
	storagedriver.StorageDriver
	repo string
	blob digest.Digest
}

func (u unlinkOnLook) Stat(ctx context.Context, p string) (storagedriver.FileInfo, error) {
	if p == layout.ReverseLinkPath(u.blob, u.repo, reclaim.LinkLayer) {
		if err := u.StorageDriver.Delete(ctx, layout.LayerLinkDir(u.repo, u.blob)); err != nil {
			return nil, err
		}
	}
	return u.StorageDriver.Stat(ctx, p)
}

func TestVerifyIgnoresReverseLinkDeletedAfterItsForwardLink(t *testing.T) {
	mem := inmemory.New()
	repo, blob := rebuilt(t, mem)
	rep, err := Verify(context.Background(), unlinkOnLook{mem, repo, blob}, VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Counts[MissingReverse] != 0 || rep.MarkerRemoved || !marked(t, mem) {
		t.Fatalf("a link deleted while verify looked: counts %v, marker removed %v", rep.Counts, rep.MarkerRemoved)
	}
}
