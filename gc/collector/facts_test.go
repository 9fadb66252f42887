package collector

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/gc"
	"github.com/reclaim-registry/reclaim/gc/internal/gctest"
	"github.com/reclaim-registry/reclaim/reclaim"
)

// crowdTracker holds each LastAccess until readConcurrency of them wait
// together (or every expected call has arrived), and records the most that
// were in flight at once.
type crowdTracker struct {
	fakeTracker
	mu                              sync.Mutex
	cond                            *sync.Cond
	expect, arrived, inflight, most int
}

func (c *crowdTracker) LastAccess(ctx context.Context, o reclaim.Object) (time.Time, bool, error) {
	c.mu.Lock()
	c.arrived++
	c.inflight++
	c.most = max(c.most, c.inflight)
	c.cond.Broadcast()
	for c.inflight < readConcurrency && c.arrived < c.expect {
		c.cond.Wait()
	}
	c.inflight--
	c.mu.Unlock()
	return c.fakeTracker.LastAccess(ctx, o)
}

// Facts are read readConcurrency at a time, no more, and two gathers of the
// same registry read the same facts.
func TestGatherIsBoundedAndDeterministic(t *testing.T) {
	const n = 3 * readConcurrency
	f := newFixture(t)
	for i := range n {
		f.Layer("g", "stray "+string(rune('a'+i)))
	}
	ct := &crowdTracker{fakeTracker: f.tr, expect: n}
	ct.cond = sync.NewCond(&ct.mu)
	f.c.tracker = ct
	s, err := takeSnapshot(context.Background(), f.D, "g")
	if err != nil {
		t.Fatal(err)
	}
	pol := testPolicy("g")
	pol.LinkDBComplete = false // layer links only: n access reads
	done := make(chan *gathered)
	go func() { done <- f.c.gather(context.Background(), s, pol) }()
	first := gctest.Wait(t, done, "the gather")
	if ct.most != readConcurrency {
		t.Fatalf("at most %d reads at once, want %d", ct.most, readConcurrency)
	}
	ct.expect, ct.arrived, ct.most = 0, 0, 0
	if again := f.c.gather(context.Background(), s, pol); !reflect.DeepEqual(first, again) {
		t.Fatal("two gathers of the same registry differ")
	}
}

// The gather reads no fact decide cannot use: nothing for what the roots
// keep, no access record or size of a blob another repository links, no
// size of a blob accessed within the window.
func TestGatherReadsOnlyWhatDecideMayNeed(t *testing.T) {
	f := newFixture(t)
	tagged := f.Image("g", nil, "base")
	f.Tag("g", "v1", tagged.Digest)
	old := f.Image("g", nil, "o1")
	shared := f.Layer("g", "shared").Digest
	f.Layer("other", "shared")
	hot := f.Layer("g", "hot").Digest
	f.tr.Touch(reclaim.Object{Blob: hot})
	s, err := takeSnapshot(context.Background(), f.D, "g")
	if err != nil {
		t.Fatal(err)
	}
	pol := testPolicy("g")
	got := f.c.gather(context.Background(), s, pol)

	cfg, o1 := digest.FromString("config of o1"), digest.FromString("o1")
	candidates := []digest.Digest{old.Digest, cfg, o1, shared, hot}
	wantAccess := []reclaim.Object{{Blob: old.Digest, Repo: "g", Kind: reclaim.LinkManifest}, {Blob: old.Digest}, {Blob: cfg}, {Blob: o1}, {Blob: hot}}
	for _, d := range []digest.Digest{cfg, o1, shared, hot} {
		wantAccess = append(wantAccess, reclaim.Object{Blob: d, Repo: "g", Kind: reclaim.LinkLayer})
	}
	for name, c := range map[string]struct{ got, want []string }{
		"pins":   {keys(got.Pins), nil},
		"links":  {keys(got.Links), strs(candidates)},
		"sizes":  {keys(got.Sizes), strs([]digest.Digest{old.Digest, cfg, o1})},
		"access": {keys(got.Access), strs(wantAccess)},
	} {
		if !slices.Equal(c.got, c.want) {
			t.Errorf("%s read\n got %v\nwant %v", name, c.got, c.want)
		}
	}
}

// testPolicy is a run of repo by an up-to-date tracker, window 1h.
func testPolicy(repo string) policy {
	return policy{Policy: gc.Policy{Repo: repo, Now: gctest.T0.Add(48 * time.Hour), Window: time.Hour, LinkDBComplete: true, LinkDBNote: "incomplete"}}
}

func keys[K comparable, V any](m map[K]V) []string { return strs(slices.Collect(maps.Keys(m))) }

func strs[T any](xs []T) []string {
	var out []string
	for _, x := range xs {
		out = append(out, fmt.Sprint(x))
	}
	slices.Sort(out)
	return out
}
