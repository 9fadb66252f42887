package trash

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
	"github.com/opencontainers/go-digest"
	"github.com/redis/go-redis/v9"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/reclaim/trashentry"
	"github.com/reclaim-registry/reclaim/redisstate"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/storagetest/redistest"
)

func newBin(t *testing.T) (*Bin, *inmemory.Driver, *miniredis.Miniredis) {
	t.Helper()
	m := miniredis.RunT(t)
	rc := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { rc.Close() })
	tr, err := redisstate.NewTracker(rc, redisstate.TrackerOptions{Prefix: "t:"})
	if err != nil {
		t.Fatal(err)
	}
	d := inmemory.New()
	b, err := New(Config{Raw: d, Driver: d, Tracker: tr, Redis: rc, Prefix: "t:", Keep: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return b, d, m
}

// A hold is stored where the data is, classified as a hold, indexed, and
// found by the name a pull asks for; dropping it removes all of that.
func TestHoldIsStoredIndexedAndDropped(t *testing.T) {
	ctx := context.Background()
	b, d, _ := newBin(t)
	blob := digest.FromString("manifest")
	e, err := b.Hold(ctx, trashentry.Entry{Kind: reclaim.KindTag, Repo: "team/app", Tag: "v1", Digest: blob, By: "retention", Plan: "p1"})
	if err != nil {
		t.Fatal(err)
	}
	if !layout.ValidTrashID(e.ID) || e.Expires.Sub(e.Removed) != time.Hour {
		t.Fatalf("entry %+v", e)
	}
	p := layout.TrashHoldPath(blob, e.ID)
	if c := layout.Classify(p); c.Kind != layout.PathTrashHold || c.Hold != e.ID || c.Digest != blob || c.String() != p {
		t.Fatalf("classify %s: %+v", p, c)
	}
	if _, err := d.GetContent(ctx, p); err != nil {
		t.Fatalf("hold not in storage: %v", err)
	}
	got, ok, err := b.Lookup(ctx, "team/app", "tag:v1")
	if err != nil || !ok || got.ID != e.ID {
		t.Fatalf("lookup: %+v %v %v", got, ok, err)
	}
	if l, _ := b.List(ctx, Filter{Plan: "p1"}); len(l) != 1 {
		t.Fatalf("list by plan: %+v", l)
	}
	if err := b.Drop(ctx, e); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := b.Lookup(ctx, "team/app", "tag:v1"); ok {
		t.Fatal("dropped entry still found by its name")
	}
	if hs, err := b.Holds(ctx, blob); err != nil || len(hs) != 0 {
		t.Fatalf("holds after drop: %+v %v", hs, err)
	}
}

// A newer entry for the same name survives the drop of an older one.
func TestDropKeepsANewerEntrysName(t *testing.T) {
	ctx := context.Background()
	b, _, _ := newBin(t)
	blob := digest.FromString("m")
	old, _ := b.Hold(ctx, trashentry.Entry{Kind: reclaim.KindManifest, Repo: "a/b", Digest: blob})
	newer, _ := b.Hold(ctx, trashentry.Entry{Kind: reclaim.KindManifest, Repo: "a/b", Digest: blob, Run: "r2"})
	if err := b.Drop(ctx, old); err != nil {
		t.Fatal(err)
	}
	got, ok, _ := b.Lookup(ctx, "a/b", blob.String())
	if !ok || got.ID != newer.ID {
		t.Fatalf("after dropping the older entry the name finds %+v (%v), want %s", got, ok, newer.ID)
	}
}

// Something at a hold path that is not a hold record is an error (it
// keeps its blob all the same: linkdb lists it), never a silent skip.
func TestCorruptHoldIsAnError(t *testing.T) {
	ctx := context.Background()
	b, d, _ := newBin(t)
	blob := digest.FromString("x")
	if err := d.PutContent(ctx, layout.TrashHoldPath(blob, "1700000000000-0badf00d"), []byte("not json")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Holds(ctx, blob); err == nil || !strings.Contains(err.Error(), "not a hold record") {
		t.Fatalf("holds of a corrupt hold: %v", err)
	}
}

func TestSelectorValidate(t *testing.T) {
	d := digest.FromString("m")
	for _, tc := range []struct {
		s  Selector
		ok bool
	}{
		{Selector{Run: "r"}, true},
		{Selector{Plan: "p"}, true},
		{Selector{Repo: "a/b", Tag: "v1"}, true},
		{Selector{Repo: "a/b", Digest: d}, true},
		{Selector{}, false},
		{Selector{Run: "r", Plan: "p"}, false},
		{Selector{Repo: "a/b"}, false},
		{Selector{Repo: "a/b", Tag: "v1", Digest: d}, false},
		{Selector{Repo: "A/B", Tag: "v1"}, false},
		{Selector{Repo: "a/b", Digest: "sha256:xyz"}, false},
	} {
		if err := tc.s.Validate(); (err == nil) != tc.ok {
			t.Errorf("%+v: %v, want ok=%v", tc.s, err, tc.ok)
		}
	}
}

func TestReferencesOf(t *testing.T) {
	l, c, m := digest.FromString("l"), digest.FromString("c"), digest.FromString("m")
	r, err := referencesOf([]byte(`{"config":{"digest":"` + c.String() + `"},"layers":[{"digest":"` + l.String() + `","urls":["http://x"]}]}`))
	if err != nil || len(r.blobs) != 2 || r.blobs[1].Digest != l || len(r.blobs[1].URLs) != 1 {
		t.Fatalf("image: %+v %v", r, err)
	}
	r, err = referencesOf([]byte(`{"manifests":[{"digest":"` + m.String() + `"}]}`))
	if err != nil || len(r.manifests) != 1 {
		t.Fatalf("index: %+v %v", r, err)
	}
	for _, bad := range []string{`{`, `{"layers":[{"digest":"md5:abc"}]}`, `{"manifests":[{"digest":"../x"}]}`} {
		if _, err := referencesOf([]byte(bad)); err == nil {
			t.Errorf("%s: parsed", bad)
		}
	}
}

// docBytesPerEntry is the Redis memory of one trash entry's index (the
// entry, its expiry, its name), as docs/operations.md states it.
const docBytesPerEntry = 1100

// TestMeasureIndexMemory holds 20,000 entries (manifests of 200
// repositories) on a private redis-server and reads INFO memory's
// used_memory before and after: the figure operators size Redis by.
//
//	go test ./trash -run TestMeasureIndexMemory -v
func TestMeasureIndexMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a redis-server and writes 20,000 entries")
	}
	srv := redistest.StartRedisServer(t, redistest.Ephemeral())
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rc.Close() })
	tr, err := redisstate.NewTracker(rc, redisstate.TrackerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(Config{Raw: nopDriver{inmemory.New()}, Driver: inmemory.New(), Tracker: tr, Redis: rc, Keep: 7 * 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	used := func() int64 {
		for _, l := range strings.Split(rc.Info(ctx, "memory").Val(), "\r\n") {
			if v, ok := strings.CutPrefix(l, "used_memory:"); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		t.Fatal("no used_memory in INFO")
		return 0
	}
	const n = 20_000
	before := used()
	for i := range n {
		d := digest.FromString(fmt.Sprint(i))
		if _, err := b.Hold(ctx, trashentry.Entry{Kind: reclaim.KindManifest, Repo: fmt.Sprintf("group/repo%03d", i%200), Digest: d,
			Size: 1234, Reason: "unreferenced", By: "gc", Run: "0123456789abcdef01234567"}); err != nil {
			t.Fatal(err)
		}
	}
	per := float64(used()-before) / n
	t.Logf("Redis memory per trash entry: %.0f bytes (%d entries)", per, n)
	if per > 2*docBytesPerEntry || per < docBytesPerEntry/2 {
		t.Errorf("%.0f bytes per entry: docs/operations.md says %d; update it", per, docBytesPerEntry)
	}
}

// nopDriver stores nothing: the measurement is of Redis alone.
type nopDriver struct{ *inmemory.Driver }

func (nopDriver) PutContent(context.Context, string, []byte) error { return nil }

// After Redis lost the index, Reindex finds every hold in storage again;
// until then, holds keep their data and nothing is listed.
func TestReindexAfterRedisLoss(t *testing.T) {
	ctx := context.Background()
	b, _, m := newBin(t)
	var ids []string
	for i := range 3 {
		e, err := b.Hold(ctx, trashentry.Entry{Kind: reclaim.KindLayerLink, Repo: "a/b", Digest: digest.FromString(fmt.Sprint(i))})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, e.ID)
	}
	m.FlushAll()
	if l, _ := b.List(ctx, Filter{}); len(l) != 0 {
		t.Fatalf("after the flush: %+v", l)
	}
	rep, err := b.Reindex(ctx)
	if err != nil || rep.Entries != 3 || len(rep.Unreadable) != 0 {
		t.Fatalf("reindex: %+v %v", rep, err)
	}
	l, _ := b.List(ctx, Filter{Repo: "a/b"})
	if len(l) != 3 {
		t.Fatalf("after the reindex: %+v, want %v", l, ids)
	}
	if _, ok, _ := b.Lookup(ctx, "a/b", "blob:"+digest.FromString("1").String()); !ok {
		t.Fatal("reindexed entry not found by its name")
	}
}
