package retention

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/retention/inuse"
)

type fakeManifests map[digest.Digest][]digest.Digest // present manifests and their children

var errRead = errors.New("read failed")

func (f fakeManifests) Children(_ context.Context, _ string, d digest.Digest) (bool, []digest.Digest, error) {
	if d == "sha256:broken" {
		return false, nil, errRead
	}
	c, ok := f[d]
	return ok, c, nil
}

// An in-use manifest that an index version lists makes that version in
// use; an in-use manifest that cannot be read aborts.
func TestVersionsInUseFollowsIndexes(t *testing.T) {
	vs := line(4)
	child := digest.FromString("child")
	m := fakeManifests{vs[0].Digest: nil, vs[1].Digest: nil, vs[2].Digest: {child}, vs[3].Digest: nil, child: nil}
	got, err := versionsInUse(t.Context(), m, "r", vs, map[digest.Digest]bool{child: true, digest.FromString("gone"): true})
	if err != nil || len(got) != 1 || !got[vs[2].Digest] {
		t.Fatalf("%v %v", got, err)
	}
	_, err = versionsInUse(t.Context(), m, "r", vs, map[digest.Digest]bool{"sha256:broken": true})
	var ae *AbortError
	if !errors.As(err, &ae) || ae.Reason != reclaim.AbortInUseVersionUnreadable {
		t.Fatalf("%v", err)
	}
}

type fakeIndex struct {
	srcs   []inuse.Source
	images map[string][]inuse.Image
	err    error
}

func (f fakeIndex) Sources(context.Context) ([]inuse.Source, error) { return f.srcs, f.err }
func (f fakeIndex) Images(_ context.Context, name string) (inuse.Source, []inuse.Image, error) {
	if name == "bad" {
		return inuse.Source{}, nil, errRead
	}
	im, ok := f.images[name]
	if !ok {
		return inuse.Source{}, nil, ErrSourceNotFound
	}
	return inuse.Source{Name: name}, im, nil
}

func TestReadIndexFailureModel(t *testing.T) {
	d := digest.FromString("d")
	fresh := t0.Add(-time.Minute)
	idx := fakeIndex{srcs: []inuse.Source{{Name: "a", UpdatedAt: fresh, Images: 1}, {Name: "bad", UpdatedAt: fresh, Images: 3}, {Name: "none", UpdatedAt: fresh}},
		images: map[string][]inuse.Image{"a": {{Repository: "r", Digest: d}, {Repository: "other", Digest: d}}}}
	for _, tc := range []struct {
		idx     fakeIndex
		sources []string
		abort   reclaim.AbortReason
		skip    SkipReason
	}{
		{idx, []string{"a"}, "", ""},
		{idx, nil, "", SkipSourceUnreadable}, // every source: "bad" comes first
		{idx, []string{"a", "none"}, "", SkipSourceEmpty},
		{idx, []string{"a", "bad"}, "", SkipSourceUnreadable},
		{idx, []string{"missing"}, "", SkipSourceEmpty},
		{fakeIndex{}, nil, reclaim.AbortInUseEmpty, ""},
		{fakeIndex{srcs: []inuse.Source{{Name: "a", UpdatedAt: fresh}}}, nil, reclaim.AbortInUseEmpty, ""},
		{fakeIndex{srcs: []inuse.Source{{Name: "a", UpdatedAt: t0.Add(-2 * time.Hour), Images: 1}}}, nil, reclaim.AbortInUseStale, ""},
		{fakeIndex{err: errRead}, nil, reclaim.AbortInUseUnreadable, ""},
	} {
		v, err := readIndex(t.Context(), tc.idx, "r", Policy{Sources: tc.sources}, time.Hour, t0)
		var ae *AbortError
		switch {
		case tc.abort != "":
			if !errors.As(err, &ae) || ae.Reason != tc.abort {
				t.Errorf("%+v: %v, want abort %s", tc, err, tc.abort)
			}
		case err != nil:
			t.Errorf("%+v: %v", tc, err)
		case tc.skip != "" && (v.skip == nil || v.skip.Reason != tc.skip):
			t.Errorf("%+v: skip %+v, want %s", tc, v.skip, tc.skip)
		case tc.skip == "" && (v.skip != nil || !v.digests[d] || len(v.digests) != 1):
			t.Errorf("%+v: %+v", tc, v)
		}
	}
}
