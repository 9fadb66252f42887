package linkdb_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
	"github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/linkdb"
	"github.com/reclaim-registry/reclaim/storage/referrers"
)

// pushed is what pushUpstream put in the registry, for breaking it on purpose.
type pushed struct {
	root      string
	layer     digest.Digest // a layer of "app" only
	shared    digest.Digest // mounted from "app" into "team/tool"
	manifest  digest.Digest // app:v1
	subject   digest.Digest // the manifest the artifact refers to
	artifact  digest.Digest // in "app", subject = subject
	indexRepo string
}

func fsDriver(root string) storagedriver.StorageDriver {
	return filesystem.New(filesystem.DriverParameters{RootDirectory: root, MaxThreads: 100})
}

// pushUpstream runs a registry with the middleware off (upstream semantics:
// forward links only) and pushes images, an index, a referrer and a mount.
func pushUpstream(t *testing.T) pushed {
	t.Helper()
	r := registrytest.Start(t)
	img := registrytest.PushImage(t, r, "app:v1", 2)
	registrytest.PushImage(t, r, "team/tool:v1", 1)
	registrytest.PushIndex(t, r, "multi/arch:latest")
	subject := registrytest.Describe(t, img)
	art := registrytest.PushArtifact(t, r, "app", subject)
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	l0, _ := layers[0].Digest()
	l1, _ := layers[1].Digest()
	registrytest.MountBlob(t, r, "app", "team/tool", l1)
	// Reclaim's HTTP layer indexes referrers even without the middleware;
	// upstream Distribution has no such index.
	if err := fsDriver(r.Root).Delete(context.Background(), layout.RepositoryPath("app")+"/_manifests/referrers"); err != nil && !layout.IsNotFound(err) {
		t.Fatal(err)
	}
	return pushed{
		root:      r.Root,
		layer:     digest.Digest(l0.String()),
		shared:    digest.Digest(l1.String()),
		manifest:  digest.Digest(subject.Digest.String()),
		subject:   digest.Digest(subject.Digest.String()),
		artifact:  digest.Digest(art.Digest.String()),
		indexRepo: "multi/arch",
	}
}

func verify(t *testing.T, d storagedriver.StorageDriver) *linkdb.Report {
	t.Helper()
	rep, err := linkdb.Verify(context.Background(), d, linkdb.VerifyOptions{Workers: 3})
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	return rep
}

// memCopy loads the registry at root into an in-memory driver: a copy of
// its own for a test that breaks it, without a disk write per file.
func memCopy(t *testing.T, root string) storagedriver.StorageDriver {
	t.Helper()
	d := inmemory.New()
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		return d.PutContent(context.Background(), "/"+filepath.ToSlash(rel), b)
	})
	if err != nil {
		t.Fatalf("load %s: %v", root, err)
	}
	return d
}

// TestUpstreamRegistry pushes through an upstream registry once; each
// subtest works on its own copy of what it wrote.
func TestUpstreamRegistry(t *testing.T) {
	p := pushUpstream(t)
	t.Run("rebuild then verify clean", func(t *testing.T) { testRebuildThenVerifyClean(t, p) })
	t.Run("verify finds each breakage", func(t *testing.T) { testVerifyFindsEachBreakage(t, p) })
	t.Run("stale kept without fence or offline", func(t *testing.T) { testKeepsStaleWithoutFenceOrOffline(t, p) })
}

func testRebuildThenVerifyClean(t *testing.T, p pushed) {
	d := fsDriver(copyTree(t, p.root))
	ctx := context.Background()

	before := verify(t, d)
	if before.ExitCode != linkdb.ExitDataLoss || before.Counts[linkdb.MissingReverse] != before.ForwardLinks {
		t.Fatalf("upstream registry: want every forward link without reverse link, exit 2; got %+v", before.Counts)
	}
	if before.Counts[linkdb.MissingReferrer] != 1 {
		t.Errorf("missing referrers = %d, want 1", before.Counts[linkdb.MissingReferrer])
	}
	if before.CompleteSince != nil {
		t.Errorf("marker before any rebuild")
	}

	// dry-run first: it reports the work and changes nothing.
	dry, err := linkdb.Rebuild(ctx, d, linkdb.RebuildOptions{DryRun: true, Checkpoint: linkdb.StorageCheckpoint(d)})
	if err != nil {
		t.Fatalf("dry-run: %v", err)
	}
	if dry.ReverseAdded != before.ForwardLinks || dry.ReferrersAdded != 1 || dry.Complete {
		t.Errorf("dry-run: %+v", dry)
	}
	if again := verify(t, d); again.Counts[linkdb.MissingReverse] != before.Counts[linkdb.MissingReverse] || again.CompleteSince != nil {
		t.Fatalf("dry-run changed storage: %+v", again.Counts)
	}
	if _, err := d.Stat(ctx, linkdb.CheckpointPath); !layout.IsNotFound(err) {
		t.Errorf("dry-run wrote a checkpoint: %v", err)
	}

	start := time.Now()
	res, err := linkdb.Rebuild(ctx, d, linkdb.RebuildOptions{Workers: 2, Checkpoint: linkdb.StorageCheckpoint(d)})
	if err != nil {
		t.Fatalf("rebuild: %v", err)
	}
	if !res.Complete || res.ReverseAdded != before.ForwardLinks || res.ReferrersAdded != 1 {
		t.Errorf("rebuild: %+v", res)
	}
	after := verify(t, d)
	if after.ExitCode != linkdb.ExitClean || len(after.Findings) != 0 {
		t.Fatalf("after rebuild: exit %d, findings %+v", after.ExitCode, after.Findings)
	}
	if after.CompleteSince == nil || after.CompleteSince.Before(start.Add(-time.Second)) {
		t.Errorf("marker: %v, want about %v", after.CompleteSince, start)
	}
	if after.ReverseLinks != after.ForwardLinks {
		t.Errorf("reverse %d != forward %d", after.ReverseLinks, after.ForwardLinks)
	}
	if _, err := d.Stat(ctx, linkdb.CheckpointPath); !layout.IsNotFound(err) {
		t.Errorf("finished rebuild left its checkpoint: %v", err)
	}
	// the referrers index is the one Referrers reads.
	refs, err := referrers.New(d).List(ctx, "app", p.subject)
	if err != nil || len(refs) != 1 || refs[0].Digest != p.artifact || string(refs[0].ArtifactType) != registrytest.ArtifactType {
		t.Errorf("referrers of %s: %+v, %v", p.subject, refs, err)
	}

	// idempotent
	res2, err := linkdb.Rebuild(ctx, d, linkdb.RebuildOptions{})
	if err != nil || res2.ReverseAdded != 0 || res2.ReferrersAdded != 0 || res2.StaleRemoved != 0 || res2.ReversePresent != before.ForwardLinks {
		t.Errorf("second rebuild: %+v, %v", res2, err)
	}
}

// copyTree gives a test its own copy of the registry at src.
func copyTree(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "root")
	err := filepath.WalkDir(src, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if e.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatalf("copy %s: %v", src, err)
	}
	return dst
}

func testVerifyFindsEachBreakage(t *testing.T, p pushed) {
	ctx := context.Background()
	orphan := digest.FromString("nobody links me")
	subjectEntry := layout.ReferrerLinkPath("app", p.subject, p.artifact)

	for _, tc := range []struct {
		name  string
		brk   func(d storagedriver.StorageDriver) error
		kind  linkdb.Kind
		exit  int
		fixed bool // an offline rebuild repairs it
	}{
		{"reverse link deleted", func(d storagedriver.StorageDriver) error {
			return d.Delete(ctx, layout.ReverseLinkPath(p.layer, "app", reclaim.LinkLayer))
		}, linkdb.MissingReverse, linkdb.ExitDataLoss, true},
		{"forward link deleted", func(d storagedriver.StorageDriver) error {
			return d.Delete(ctx, layout.LayerLinkPath("team/tool", p.shared))
		}, linkdb.StaleReverse, linkdb.ExitLeaks, true},
		{"blob nobody links", func(d storagedriver.StorageDriver) error {
			return d.PutContent(ctx, layout.BlobDataPath(orphan), []byte("nobody links me"))
		}, linkdb.Reclaimable, linkdb.ExitClean, false},
		{"blob data missing", func(d storagedriver.StorageDriver) error {
			return d.Delete(ctx, layout.BlobDataPath(p.layer))
		}, linkdb.BrokenForward, linkdb.ExitBroken, false},
		{"forward link content corrupt", func(d storagedriver.StorageDriver) error {
			return d.PutContent(ctx, layout.LayerLinkPath("app", p.layer), []byte("sha256:nothex"))
		}, linkdb.Corrupt, linkdb.ExitDataLoss, false},
		{"reverse link content corrupt", func(d storagedriver.StorageDriver) error {
			return d.PutContent(ctx, layout.ReverseLinkPath(p.layer, "app", reclaim.LinkLayer), []byte("\x00garbage"))
		}, linkdb.Corrupt, linkdb.ExitDataLoss, false},
		{"referrer revision gone", func(d storagedriver.StorageDriver) error {
			return d.Delete(ctx, layout.RevisionLinkPath("app", p.artifact))
		}, linkdb.StaleReferrer, linkdb.ExitLeaks, true},
		{"referrers entry missing", func(d storagedriver.StorageDriver) error {
			return d.Delete(ctx, subjectEntry)
		}, linkdb.MissingReferrer, linkdb.ExitDataLoss, true},
		{"tag without its current link", func(d storagedriver.StorageDriver) error {
			return d.Delete(ctx, layout.TagCurrentPath("app", "v1"))
		}, linkdb.DanglingTag, linkdb.ExitBroken, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := memCopy(t, p.root)
			if _, err := linkdb.Rebuild(ctx, d, linkdb.RebuildOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := tc.brk(d); err != nil {
				t.Fatal(err)
			}
			rep := verify(t, d)
			if rep.Counts[tc.kind] == 0 {
				t.Fatalf("%s not reported: %+v", tc.kind, rep.Counts)
			}
			if rep.ExitCode != tc.exit {
				t.Errorf("exit %d, want %d (%+v)", rep.ExitCode, tc.exit, rep.Counts)
			}
			if !tc.fixed {
				return
			}
			// Stale entries are old enough only in the future.
			var mu sync.Mutex
			var reviewed []digest.Digest
			res, err := linkdb.Rebuild(ctx, d, linkdb.RebuildOptions{Offline: true,
				Review: func(_ context.Context, b digest.Digest) { mu.Lock(); reviewed = append(reviewed, b); mu.Unlock() }}.At(func() time.Time { return time.Now().Add(time.Hour) }))
			if err != nil {
				t.Fatalf("rebuild: %v", err)
			}
			// A blob whose stale reverse link went may have lost its last
			// link: the reclaimer must hear of it.
			if tc.kind == linkdb.StaleReverse && int64(len(reviewed)) != rep.Counts[linkdb.StaleReverse] {
				t.Errorf("removed %d stale reverse links, sent %v for review", rep.Counts[linkdb.StaleReverse], reviewed)
			}
			if rep := verify(t, d); rep.ExitCode != linkdb.ExitClean || rep.Counts[tc.kind] != 0 {
				t.Errorf("after rebuild: exit %d %+v (rebuild %+v)", rep.ExitCode, rep.Counts, res)
			}
		})
	}
}

func testKeepsStaleWithoutFenceOrOffline(t *testing.T, p pushed) {
	ctx := context.Background()
	d := memCopy(t, p.root)
	if _, err := linkdb.Rebuild(ctx, d, linkdb.RebuildOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := d.Delete(ctx, layout.LayerLinkPath("team/tool", p.shared)); err != nil {
		t.Fatal(err)
	}
	later := func() time.Time { return time.Now().Add(time.Hour) }
	for _, opts := range []linkdb.RebuildOptions{
		linkdb.RebuildOptions{}.At(later), // serving, no fence: report only
		{Offline: true},                   // offline, but the entry is young
		linkdb.RebuildOptions{Offline: true, DryRun: true}.At(later), // dry-run
	} {
		res, err := linkdb.Rebuild(ctx, d, opts)
		if err != nil {
			t.Fatal(err)
		}
		if res.Counts[linkdb.StaleReverse] != 1 {
			t.Errorf("%+v: stale not reported: %+v", opts, res.Counts)
		}
		if _, err := d.Stat(ctx, layout.ReverseLinkPath(p.shared, "team/tool", reclaim.LinkLayer)); err != nil {
			t.Fatalf("%+v removed the stale reverse link: %v", opts, err)
		}
	}
}
