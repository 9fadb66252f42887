package collector

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/gc"
	"github.com/reclaim-registry/reclaim/gc/internal/gctest"
	"github.com/reclaim-registry/reclaim/reclaim"
)

// fakeTracker is gctest's tracker, fencing with the collector's Hold.
type fakeTracker struct{ *gctest.Tracker }

func newFakeTracker() fakeTracker { return fakeTracker{gctest.NewTracker()} }

func (f fakeTracker) Fence(ctx context.Context, o reclaim.Object, window, lease time.Duration) (reclaim.Hold, error) {
	h, err := f.FenceHold(ctx, o, window, lease)
	if err != nil {
		return nil, err
	}
	return h, nil
}

// fixture writes Distribution's layout directly.
type fixture struct {
	*gctest.Store
	tr fakeTracker
	c  *Collector
}

func newFixture(t *testing.T, mod ...func(*Config)) *fixture {
	t.Helper()
	f := &fixture{Store: &gctest.Store{T: t, D: inmemory.New()}, tr: newFakeTracker()}
	cfg := Config{Driver: f.D, Tracker: f.tr, Links: gctest.ScanLinks{D: f.D},
		LinkDBComplete: func(context.Context) (bool, error) { return true, nil },
		Window:         time.Hour, Now: f.tr.Clock}
	for _, m := range mod {
		m(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.c = c
	return f
}

// collect runs a dry run, checks it changed nothing, then a real run, and
// checks the real run deleted exactly what the dry run announced.
func (f *fixture) collect(repo string, o RunOptions) *Report {
	f.T.Helper()
	ctx := context.Background()
	before := f.Tree()
	o.DryRun = true
	dry, err := f.c.Collect(ctx, repo, o)
	if err != nil {
		f.T.Fatalf("dry run: %v", err)
	}
	if after := f.Tree(); after != before {
		f.T.Fatalf("dry run changed storage:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	o.DryRun = false
	rep, err := f.c.Collect(ctx, repo, o)
	if err != nil {
		f.T.Fatalf("collect: %v", err)
	}
	if !sameDigests(dry.ManifestsDeleted, rep.ManifestsDeleted) || !sameDigests(dry.LayersUnlinked, rep.LayersUnlinked) ||
		!sameDigests(dry.BlobsDeleted, rep.BlobsDeleted) || dry.BytesFreed != rep.BytesFreed {
		f.T.Fatalf("dry run and real run differ:\ndry:  %+v\nreal: %+v", summary(dry), summary(rep))
	}
	checkOneDecisionEach(f.T, rep)
	checkOneDecisionEach(f.T, dry)
	return rep
}

func summary(r *Report) string {
	return fmt.Sprintf("manifests=%v layers=%v blobs=%v bytes=%d kept=%v", r.ManifestsDeleted, r.LayersUnlinked, r.BlobsDeleted, r.BytesFreed, r.Kept)
}

func sameDigests(a, b []digest.Digest) bool {
	x := append([]digest.Digest(nil), a...)
	y := append([]digest.Digest(nil), b...)
	sort.Slice(x, func(i, j int) bool { return x[i] < x[j] })
	sort.Slice(y, func(i, j int) bool { return y[i] < y[j] })
	return fmt.Sprint(x) == fmt.Sprint(y)
}

func checkOneDecisionEach(t testing.TB, r *Report) {
	t.Helper()
	seen := map[key]bool{}
	for _, d := range r.Decisions() {
		k := key{d.Kind, d.Digest}
		if seen[k] {
			t.Fatalf("two decisions for %s %s", d.Kind, d.Digest)
		}
		if !d.Reason.Valid() {
			t.Fatalf("invalid reason for %s %s", d.Kind, d.Digest)
		}
		if strings.Contains(d.Detail, gc.ErrNoFact.Error()) {
			t.Fatalf("%s %s: decide read a fact that was not gathered: %s", d.Kind, d.Digest, d.Detail)
		}
		seen[k] = true
	}
}

func reasonOf(r *Report, k reclaim.ObjectKind, d digest.Digest) reclaim.Reason {
	return decisionOf(r, k, d).Reason
}

func decisionOf(r *Report, k reclaim.ObjectKind, d digest.Digest) gc.Decision {
	for _, dec := range r.Decisions() {
		if dec.Kind == k && dec.Digest == d {
			return dec
		}
	}
	return gc.Decision{}
}

func has(ds []digest.Digest, d digest.Digest) bool {
	for _, x := range ds {
		if x == d {
			return true
		}
	}
	return false
}
