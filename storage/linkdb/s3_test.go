package linkdb

import (
	"context"
	"testing"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/linkdb/internal/gen"
	"github.com/reclaim-registry/reclaim/storage/storagetest/s3test"
)

// versitygw is an s3aws driver on a fresh versitygw (s3test.StartS3;
// the test is skipped when versitygw is not installed).
func versitygw(t testing.TB) storagedriver.StorageDriver {
	t.Helper()
	return s3test.StartS3(t).Driver(t, "/registry")
}

// versitygwAt is versitygw serving directory root, which may hold the
// bucket from an earlier run.
func versitygwAt(t testing.TB, root string) storagedriver.StorageDriver {
	t.Helper()
	return s3test.StartS3At(t, root).Driver(t, "/registry")
}

func TestRebuildAndVerifyOnS3(t *testing.T) {
	if testing.Short() {
		t.Skip("starts versitygw")
	}
	d := versitygw(t)
	ctx := context.Background()
	st := generate(t, d, gen.Spec{Repos: 6, Images: 2, LayersPerImage: 3, SharedLayers: 1, ReferrerEvery: 2})

	if rep := verify(t, d); rep.Counts[MissingReverse] != st.Links() {
		t.Fatalf("before rebuild: %+v, want %d missing", rep.Counts, st.Links())
	}
	res, err := Rebuild(ctx, d, RebuildOptions{Workers: 4, Checkpoint: StorageCheckpoint(d)})
	if err != nil || !res.Complete || res.ReverseAdded != st.Links() {
		t.Fatalf("rebuild: %+v %v", res, err)
	}
	if rep := verify(t, d); rep.ExitCode != ExitClean || rep.ReverseLinks != st.Links() || rep.ReferrerEntries != st.Referrers {
		t.Fatalf("after rebuild: exit %d %+v, reverse %d referrers %d", rep.ExitCode, rep.Counts, rep.ReverseLinks, rep.ReferrerEntries)
	}

	// Break it twice: a missing reverse link and a stale one.
	var layer string
	err = d.Walk(ctx, layout.LayersDir(gen.RepoName(0)), func(fi storagedriver.FileInfo) error {
		if !fi.IsDir() && layer == "" {
			layer = fi.Path()
		}
		return nil
	})
	if err != nil || layer == "" {
		t.Fatal(err)
	}
	c := layout.Classify(layer)
	if err := d.Delete(ctx, layout.ReverseLinkPath(c.Digest, c.Repo, reclaim.LinkLayer)); err != nil {
		t.Fatal(err)
	}
	if err := d.PutContent(ctx, layout.ReverseLinkPath(c.Digest, "elsewhere", reclaim.LinkLayer), []byte(c.Digest)); err != nil {
		t.Fatal(err)
	}
	rep := verify(t, d)
	if rep.Counts[MissingReverse] != 1 || rep.Counts[StaleReverse] != 1 || rep.ExitCode != ExitDataLoss {
		t.Fatalf("broken: exit %d %+v", rep.ExitCode, rep.Counts)
	}
	if _, err := Rebuild(ctx, d, RebuildOptions{Offline: true, MinAge: -1}); err != nil {
		t.Fatal(err)
	}
	if rep := verify(t, d); rep.ExitCode != ExitClean {
		t.Fatalf("repaired: exit %d %+v", rep.ExitCode, rep.Counts)
	}
}
