package collector

import (
	"context"
	"errors"
	"testing"
	"time"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
	"github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/reclaim-registry/reclaim/gc/internal/gctest"
	"github.com/reclaim-registry/reclaim/internal/config"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/middleware"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

// usageFixture is a fixture whose collector runs on the reclaim middleware
// (real reverse links) with an in-memory usage store. failStat, when set,
// fails every Stat of that path below the middleware.
type usageFixture struct {
	*fixture
	usage      *gctest.Usage
	failStat   string
	linkdbOK   bool
	afterLinks func() // runs once the reverse links are written
}

func newUsageFixture(t *testing.T, mod ...func(*Config)) *usageFixture {
	t.Helper()
	mem := inmemory.New()
	u := &usageFixture{fixture: &fixture{Store: &gctest.Store{T: t, D: mem}, tr: newFakeTracker()}, linkdbOK: true}
	u.usage = gctest.NewUsage(u.tr.Clock)
	hook := &storagetest.HookDriver{StorageDriver: mem, Before: func(ctx context.Context, method, p string) error {
		if method == "Stat" && p == u.failStat {
			return gctest.ErrBoom
		}
		return nil
	}}
	env, err := middleware.NewEnv(context.Background(), hook, config.Options{Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.Close() })
	cfg := Config{Driver: env.Driver, Tracker: u.tr, Links: env.Links, Context: middleware.WithoutAccessRecords, Usage: u.usage,
		LinkDBComplete: func(context.Context) (bool, error) { return u.linkdbOK, nil }, Window: time.Hour, Now: u.tr.Clock}
	for _, m := range mod {
		m(&cfg)
	}
	if u.c, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	return u
}

// truth walks the whole storage: the blobs only repo links (their data
// bytes), and every blob's data size.
func truth(t *testing.T, d storagedriver.StorageDriver, repo string) (exclusive int64, data map[digest.Digest]int64) {
	t.Helper()
	ctx := context.Background()
	linkers := map[digest.Digest]map[string]bool{}
	data = map[digest.Digest]int64{}
	err := d.Walk(ctx, layout.RootPath, func(fi storagedriver.FileInfo) error {
		p := layout.Classify(fi.Path())
		switch {
		case fi.IsDir():
		case p.Kind == layout.PathLayerLink, p.Kind == layout.PathRevisionLink:
			if linkers[p.Digest] == nil {
				linkers[p.Digest] = map[string]bool{}
			}
			linkers[p.Digest][p.Repo] = true
		case p.Kind == layout.PathBlobData:
			data[p.Digest] = fi.Size()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for b, repos := range linkers {
		if len(repos) == 1 && repos[repo] {
			exclusive += data[b]
		}
	}
	return exclusive, data
}

// freed is the data bytes present before and gone after.
func freed(before, after map[digest.Digest]int64) (n int64) {
	for b, size := range before {
		if _, ok := after[b]; !ok {
			n += size
		}
	}
	return n
}

// usageCase is one registry of TestUsageAgainstBruteForce: build writes
// it; uncertain is how many blobs the estimate must find uncertain (-1:
// all); exclusive, that it must find some bytes exclusive and reclaimable.
type usageCase struct {
	name      string
	build     func(u *usageFixture)
	uncertain int
	exclusive bool
}

const usageRepo = "team/app"

var usageCases = []usageCase{
	{"shared base layers", func(u *usageFixture) {
		u.Tag("team/base", "v1", u.Image("team/base", nil, "base", "os").Digest)
		u.Tag(usageRepo, "v1", u.Image(usageRepo, nil, "base", "os", "app v1").Digest)
		u.Image(usageRepo, nil, "base", "os", "app v0") // untagged: its own layer and config go, base and os stay
	}, 0, true},
	{"a blob linked twice in one repository", func(u *usageFixture) {
		u.Tag(usageRepo, "v1", u.Image(usageRepo, nil, "twice", "one").Digest)
		u.Image(usageRepo, nil, "twice", "two")
	}, 0, true},
	{"a tag deleted", func(u *usageFixture) {
		u.Tag(usageRepo, "v1", u.Image(usageRepo, nil, "v1 layer").Digest)
		u.Tag(usageRepo, "v2", u.Image(usageRepo, nil, "v2 layer").Digest)
		u.Untag(usageRepo, "v1")
	}, 0, true},
	{"an index with children", func(u *usageFixture) {
		a, b := u.Image(usageRepo, nil, "amd64"), u.Image(usageRepo, nil, "arm64")
		u.Tag(usageRepo, "multi", u.Index(usageRepo, a, b).Digest)
		c, d := u.Image(usageRepo, nil, "old amd64"), u.Image(usageRepo, nil, "old arm64")
		u.Index(usageRepo, c, d) // untagged: it and its children go
	}, 0, true},
	{"a referrer", func(u *usageFixture) {
		img := u.Image(usageRepo, nil, "signed")
		u.Tag(usageRepo, "v1", img.Digest)
		u.Image(usageRepo, &v1.Descriptor{MediaType: img.MediaType, Digest: img.Digest, Size: img.Size}, "signature")
		old := u.Image(usageRepo, nil, "unsigned old")
		u.Image(usageRepo, &v1.Descriptor{MediaType: old.MediaType, Digest: old.Digest, Size: old.Size}, "old signature")
	}, 0, true},
	{"a corrupt reverse link", func(u *usageFixture) {
		u.Tag(usageRepo, "v1", u.Image(usageRepo, nil, "kept").Digest)
		bad := u.Image(usageRepo, nil, "corrupt").Digest
		// another repository's reverse link path holds a directory
		u.afterLinks = func() {
			u.Put(layout.ReverseLinkPath(bad, "other/repo", reclaim.LinkManifest)+"/x", []byte("not a link"))
		}
	}, 1, true},
	{"an unknown size", func(u *usageFixture) {
		u.Tag(usageRepo, "v1", u.Image(usageRepo, nil, "kept").Digest)
		u.Image(usageRepo, nil, "unstattable")
		u.failStat = layout.BlobDataPath(digest.FromString("unstattable"))
	}, 1, true},
	{"an untagged manifest pulled within the window", func(u *usageFixture) {
		u.Tag(usageRepo, "v1", u.Image(usageRepo, nil, "kept").Digest)
		pulled := u.Image(usageRepo, nil, "pulled by digest").Digest
		u.Image(usageRepo, nil, "forgotten")
		u.tr.Touch(reclaim.Object{Blob: pulled, Repo: usageRepo, Kind: reclaim.LinkManifest})
	}, 0, true},
	{"the link database incomplete", func(u *usageFixture) {
		u.Tag(usageRepo, "v1", u.Image(usageRepo, nil, "kept").Digest)
		u.Image(usageRepo, nil, "untagged")
		u.linkdbOK = false
	}, -1, false},
}

// TestUsageAgainstBruteForce estimates one repository, then measures the
// truth by walking the whole storage (exclusive bytes) and by collecting
// for real (the bytes freed). The estimate never exceeds the truth, and
// equals it when no check was uncertain.
func TestUsageAgainstBruteForce(t *testing.T) {
	for _, tc := range usageCases {
		t.Run(tc.name, func(t *testing.T) { checkAgainstTruth(t, tc) })
	}
}

func checkAgainstTruth(t *testing.T, tc usageCase) {
	const repo = usageRepo
	u := newUsageFixture(t)
	tc.build(u)
	u.WriteReverseLinks()
	if u.afterLinks != nil {
		u.afterLinks()
	}
	ctx := context.Background()
	before := u.Tree()
	est, dry, err := u.c.Usage(ctx, repo)
	if err != nil {
		t.Fatal(err)
	}
	if after := u.Tree(); after != before {
		t.Fatal("the estimate changed storage")
	}
	if got, ok := u.usage.Record(repo); !ok || got.RunID != dry.RunID || got.ExclusiveBytes != est.ExclusiveBytes {
		t.Fatalf("stored %+v (%v), want the estimate %+v", got, ok, est)
	}
	exclusive, data := truth(t, u.D, repo)
	rep, err := u.c.Collect(ctx, repo, RunOptions{DryRun: false})
	if err != nil {
		t.Fatal(err)
	}
	_, dataAfter := truth(t, u.D, repo)
	reclaimable := freed(data, dataAfter)
	t.Logf("estimate: reclaimable %d (%d blobs), exclusive %d (%d blobs), %d shared, %d uncertain; truth: freed %d, exclusive %d",
		est.ReclaimableBytes, est.ReclaimableBlobs, est.ExclusiveBytes, est.ExclusiveBlobs, est.SharedBlobs, est.UncertainBlobs, reclaimable, exclusive)
	if est.ReclaimableBytes > reclaimable || est.ExclusiveBytes > exclusive {
		t.Fatalf("the estimate overstates: reclaimable %d > %d freed, or exclusive %d > %d", est.ReclaimableBytes, reclaimable, est.ExclusiveBytes, exclusive)
	}
	if est.ReclaimableBytes != rep.BytesFreed {
		t.Errorf("reclaimable %d, the collect right after freed %d (report)", est.ReclaimableBytes, rep.BytesFreed)
	}
	switch {
	case tc.uncertain < 0:
		if est.UncertainBlobs != est.Blobs || est.ExclusiveBytes != 0 || est.ReclaimableBytes != 0 || est.LinkDBComplete {
			t.Errorf("link database incomplete: %+v; want every blob uncertain, nothing exclusive or reclaimable", est)
		}
	case est.UncertainBlobs != tc.uncertain:
		t.Errorf("%d uncertain blobs, want %d", est.UncertainBlobs, tc.uncertain)
	case tc.uncertain == 0 && (est.ReclaimableBytes != reclaimable || est.ExclusiveBytes != exclusive):
		t.Errorf("nothing uncertain, yet the estimate (%d, %d) is not the truth (%d, %d)", est.ReclaimableBytes, est.ExclusiveBytes, reclaimable, exclusive)
	}
	if tc.exclusive && (est.ExclusiveBytes == 0 || est.ReclaimableBytes == 0) {
		t.Errorf("estimate %+v: want some exclusive and some reclaimable bytes in this case", est)
	}
}

// TestUsageAfterCollect: a real collect writes what it leaves: nothing
// reclaimable, the exclusive bytes of what it kept, not due.
func TestUsageAfterCollect(t *testing.T) {
	u := newUsageFixture(t)
	u.Tag("team/base", "v1", u.Image("team/base", nil, "base").Digest)
	u.Tag("team/app", "v1", u.Image("team/app", nil, "base", "app").Digest)
	u.Image("team/app", nil, "base", "old")
	u.WriteReverseLinks()
	ctx := context.Background()
	before, _, err := u.c.Usage(ctx, "team/app")
	if err != nil {
		t.Fatal(err)
	}
	rep, err := u.c.Collect(ctx, "team/app", RunOptions{DryRun: false})
	if err != nil {
		t.Fatal(err)
	}
	after, ok := u.usage.Record("team/app")
	exclusive, _ := truth(t, u.D, "team/app")
	switch {
	case !ok || after.RunID != rep.RunID:
		t.Fatalf("after the collect the record is %+v; want the collect's", after)
	case after.ReclaimableBytes != 0 || after.ExclusiveBytes != exclusive || after.ExclusiveBytes != before.ExclusiveBytes-rep.BytesFreed:
		t.Fatalf("after a collect that freed %d: %+v; want 0 reclaimable and exclusive %d (truth), %d before", rep.BytesFreed, after, exclusive, before.ExclusiveBytes)
	case u.usage.IsDue("team/app"):
		t.Fatal("a complete collect left its record due")
	}
	// a dry run with options of its own writes nothing
	keep := true
	if _, err := u.c.Collect(ctx, "team/app", RunOptions{DryRun: true, KeepUntagged: &keep}); err != nil {
		t.Fatal(err)
	}
	if again, _ := u.usage.Record("team/app"); again.RunID != rep.RunID {
		t.Fatalf("a dry run with untagged=keep wrote usage %+v", again)
	}
}

// TestUsageCappedCollectIsDueAtOnce: a collect cut short by its cap leaves
// more to reclaim than it can say, so its record is due at once.
func TestUsageCappedCollectIsDueAtOnce(t *testing.T) {
	u := newUsageFixture(t, func(c *Config) { c.Cap = 1 })
	u.Tag("team/app", "v1", u.Image("team/app", nil, "kept").Digest)
	for _, l := range []string{"a", "b", "c"} {
		u.Image("team/app", nil, l)
	}
	u.WriteReverseLinks()
	ctx := context.Background()
	est, _, err := u.c.Usage(ctx, "team/app")
	if err != nil {
		t.Fatal(err)
	}
	if !est.Capped || est.ManifestsDeletable != 1 || !u.usage.IsDue("team/app") {
		t.Fatalf("capped estimate %+v, due %v; want capped, 1 manifest, due", est, u.usage.IsDue("team/app"))
	}
	claims, err := u.usage.ClaimDueUsage(ctx, 1, time.Minute)
	if err != nil || len(claims) != 1 {
		t.Fatalf("claim the capped estimate: %v %v", claims, err)
	}
	u.usage.DoneDueUsage(ctx, claims[0]) //nolint:errcheck
	if u.usage.IsDue("team/app") {
		t.Fatal("still due after its claim was done")
	}
	if _, err := u.c.Collect(ctx, "team/app", RunOptions{DryRun: false}); err != nil {
		t.Fatal(err)
	}
	if rec, _ := u.usage.Record("team/app"); !rec.Capped || !u.usage.IsDue("team/app") || rec.ReclaimableBytes != 0 {
		t.Fatalf("after a capped collect: %+v, due %v; want capped, due at once, 0 reclaimable", rec, u.usage.IsDue("team/app"))
	}
}

// TestUsageWhileBlockedReclaimsNothing: while Redis has recorded for less
// than the window a collect would abort, so nothing is reclaimable now;
// the exclusive bytes do not depend on Redis.
func TestUsageWhileBlockedReclaimsNothing(t *testing.T) {
	u := newUsageFixture(t)
	u.Tag("team/app", "v1", u.Image("team/app", nil, "kept").Digest)
	u.Image("team/app", nil, "old")
	u.WriteReverseLinks()
	u.tr.Since = u.tr.Clock().Add(-time.Minute)
	est, _, err := u.c.Usage(context.Background(), "team/app")
	if err != nil {
		t.Fatal(err)
	}
	exclusive, _ := truth(t, u.D, "team/app")
	if est.ReclaimableBytes != 0 || est.ReclaimableBlobs != 0 || est.ManifestsDeletable != 1 || est.ExclusiveBytes != exclusive ||
		len(est.Blockers) != 1 || est.Blockers[0] != reclaim.AbortRedisRecordingTooShort {
		t.Fatalf("blocked estimate %+v; want nothing reclaimable, blocker redis_recording_too_short, exclusive %d", est, exclusive)
	}
}

// TestUsageOfAGoneRepositoryIsDropped: refreshing a repository that no
// longer exists drops its record.
func TestUsageOfAGoneRepositoryIsDropped(t *testing.T) {
	u := newUsageFixture(t)
	u.usage.PutUsage(context.Background(), reclaim.Usage{Repository: "gone/repo", ReclaimableBytes: 5}, false) //nolint:errcheck
	if _, _, err := u.c.Usage(context.Background(), "gone/repo"); !errors.Is(err, ErrRepositoryNotFound) {
		t.Fatalf("Usage of a missing repository: %v", err)
	}
	if _, ok := u.usage.Record("gone/repo"); ok {
		t.Fatal("the record of a gone repository is still there")
	}
}
