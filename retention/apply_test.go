package retention

import (
	"context"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/retention/inuse"
	"github.com/reclaim-registry/reclaim/retention/pin"
)

type fakeTags struct {
	tags    map[string]digest.Digest
	deleted []string
	onDel   func(tag string)
}

func (f *fakeTags) Tag(_ context.Context, _, tag string) (digest.Digest, bool, error) {
	if tag == "unreadable" {
		return "", false, errRead
	}
	d, ok := f.tags[tag]
	return d, ok, nil
}

func (f *fakeTags) DeleteTag(ctx context.Context, td TagDelete, check func(context.Context) (LeftReason, string)) (LeftReason, string, string) {
	repo, tag, want := td.Repo, td.Tag, td.Want
	d, ok, err := f.Tag(ctx, repo, tag)
	switch {
	case err != nil:
		return ChangedCheckFail, "read tag: " + err.Error(), ""
	case !ok:
		return ChangedTagGone, "", ""
	case d != want:
		return ChangedTagMoved, "now " + d.String(), ""
	}
	if r, detail := check(ctx); r != "" {
		return r, detail, ""
	}
	delete(f.tags, tag)
	f.deleted = append(f.deleted, tag)
	if f.onDel != nil {
		f.onDel(tag)
	}
	return "", "", ""
}

type fakeContains map[inuse.Image]bool

func (f fakeContains) Contains(_ context.Context, im inuse.Image) (bool, error) { return f[im], nil }

type fakePins []pin.Pin

func (f fakePins) List(context.Context, string) ([]pin.Pin, error) { return f, nil }

// Apply deletes oldest first, leaves what changed with its reason, and
// stops when a re-read of the whole index finds it stale.
func TestApplyFreshState(t *testing.T) {
	vs := line(6) // vs[5] oldest
	cands := make([]Entry, 0, 6)
	tags := map[string]digest.Digest{}
	for _, v := range vs {
		cands = append(cands, Entry{Version: v, Reason: Candidate})
		tags[v.Tags[0]] = v.Digest
	}
	tags[vs[1].Tags[0]] = digest.FromString("moved")
	delete(tags, vs[2].Tags[0])
	cands[0].Tags = []string{"unreadable"}
	child := digest.FromString("child")
	m := fakeManifests{child: nil}
	for _, v := range vs {
		m[v.Digest] = nil
	}
	m[vs[3].Digest] = []digest.Digest{child}
	ft := &fakeTags{tags: tags}
	now := t0
	idx := fakeIndex{srcs: []inuse.Source{{Name: "a", UpdatedAt: t0, Images: 1}}, images: map[string][]inuse.Image{"a": {{Repository: "r", Digest: child}}}}
	a := &Applier{Tags: ft, Manifests: m, Index: idx, InUse: fakeContains{{Repository: "r", Digest: child}: true}, Pins: fakePins{{Ref: vs[4].Tags[0]}},
		MaxAge: time.Hour, Recheck: time.Minute, Now: func() time.Time { return now }}
	plan := &Plan{ID: "p", Repository: "r", Status: PlanReady, Decision: Decision{Candidates: cands}}
	rep := a.Apply(t.Context(), plan, ApplyOptions{})
	want := map[string]LeftReason{"unreadable": ChangedCheckFail, vs[1].Tags[0]: ChangedTagMoved, vs[2].Tags[0]: ChangedTagGone,
		vs[3].Tags[0]: ChangedInUse, vs[4].Tags[0]: ChangedPinned}
	if len(rep.Deleted) != 1 || rep.Deleted[0].Tag != vs[5].Tags[0] || len(rep.Skipped) != 5 || rep.Aborted != nil {
		t.Fatalf("%+v", rep)
	}
	for _, s := range rep.Skipped {
		if want[s.Tag] != s.Reason {
			t.Errorf("%s: %s, want %s", s.Tag, s.Reason, want[s.Tag])
		}
	}

	// The index goes stale during the run: the next re-read stops it.
	for _, v := range vs {
		ft.tags[v.Tags[0]] = v.Digest
	}
	cands[0].Tags = vs[0].Tags
	a.InUse, a.Pins = fakeContains{}, fakePins{}
	ft.deleted = nil
	ft.onDel = func(string) { now = now.Add(2 * time.Hour) }
	rep = a.Apply(t.Context(), plan, ApplyOptions{})
	if len(rep.Deleted) != 1 || rep.Aborted == nil || rep.Aborted.Reason != reclaim.AbortInUseStale {
		t.Fatalf("%+v", rep)
	}
}

// deletionLog is a DeletionSink that keeps what it hears.
type deletionLog []reclaim.Deletions

func (l *deletionLog) Deleted(_ context.Context, d reclaim.Deletions) { *l = append(*l, d) }

// Apply tells its sink the tags it deleted, once, in the order it deleted
// them, an apply stopped by a stale index included; nothing when it
// deleted nothing.
func TestApplyTellsDeletions(t *testing.T) {
	vs := line(3) // vs[2] oldest: deleted first
	tags := map[string]digest.Digest{}
	m := fakeManifests{}
	var cands []Entry
	for _, v := range vs {
		cands = append(cands, Entry{Version: v, Reason: Candidate})
		tags[v.Tags[0]] = v.Digest
		m[v.Digest] = nil
	}
	now := t0
	ft := &fakeTags{tags: tags}
	var told deletionLog
	a := &Applier{Tags: ft, Manifests: m, Index: fakeIndex{srcs: []inuse.Source{{Name: "a", UpdatedAt: t0, Images: 1}}}, InUse: fakeContains{}, Pins: fakePins{},
		MaxAge: time.Hour, Recheck: time.Minute, Now: func() time.Time { return now }, Deletions: &told, Instance: "i"}
	plan := &Plan{ID: "p", Repository: "r", Status: PlanReady, Decision: Decision{Candidates: cands}}
	a.Apply(t.Context(), plan, ApplyOptions{})
	if len(told) != 1 || len(told[0].Objects) != 3 || told[0].Source != "retention" || told[0].PlanID != "p" || told[0].Instance != "i" {
		t.Fatalf("told %+v", told)
	}
	for i, o := range told[0].Objects {
		v := vs[2-i]
		if o.Kind != reclaim.KindTag || o.Repository != "r" || o.Tag != v.Tags[0] || o.Digest != v.Digest {
			t.Errorf("deletion %d: %+v, want %s %s", i, o, v.Tags[0], v.Digest)
		}
	}

	told = nil
	a.Apply(t.Context(), plan, ApplyOptions{}) // every tag is gone: nothing deleted, nothing told
	if len(told) != 0 {
		t.Fatalf("told %+v", told)
	}
	for _, v := range vs {
		ft.tags[v.Tags[0]] = v.Digest
	}
	ft.onDel = func(string) { now = now.Add(2 * time.Hour) } // stale after the first delete
	a.Apply(t.Context(), plan, ApplyOptions{})
	if len(told) != 1 || len(told[0].Objects) != 1 || told[0].Objects[0].Tag != vs[2].Tags[0] {
		t.Fatalf("told %+v", told)
	}
}

// Apply compares each read of the index with the plan's: it says when the
// repository's in-use manifests changed, and stops before its next delete
// when asked to.
func TestApplyIndexChanged(t *testing.T) {
	vs := line(4) // vs[3] oldest, deleted first
	deployed := digest.FromString("deployed")
	run := func(t *testing.T, planned []digest.Digest, o ApplyOptions, onDel func(idx fakeIndex)) (*ApplyReport, *fakeTags) {
		cands, tags := []Entry{}, map[string]digest.Digest{}
		for _, v := range vs {
			cands = append(cands, Entry{Version: v, Reason: Candidate})
			tags[v.Tags[0]] = v.Digest
		}
		idx := fakeIndex{srcs: []inuse.Source{{Name: "a", UpdatedAt: t0, Images: 1}}, images: map[string][]inuse.Image{"a": {{Repository: "r", Digest: deployed}}}}
		ft := &fakeTags{tags: tags, onDel: func(string) {
			if onDel != nil {
				onDel(idx)
			}
		}}
		a := &Applier{Tags: ft, Manifests: fakeManifests{}, Index: idx, InUse: fakeContains{}, Pins: fakePins{},
			MaxAge: time.Hour, Recheck: 0, Now: func() time.Time { return t0 }}
		plan := &Plan{ID: "p", Repository: "r", Status: PlanReady, InUse: planned, Decision: Decision{Candidates: cands}}
		return a.Apply(t.Context(), plan, o), ft
	}
	t.Run("unchanged", func(t *testing.T) {
		rep, _ := run(t, []digest.Digest{deployed}, ApplyOptions{StopIfIndexChanged: true}, nil)
		if rep.InUseChanged || rep.InUseNote != "" || len(rep.Deleted) != 4 || rep.Aborted != nil {
			t.Fatalf("%+v", rep)
		}
	})
	deploy := func(idx fakeIndex) { // after the first delete, vs[2] is deployed too
		idx.images["a"] = []inuse.Image{{Repository: "r", Digest: deployed}, {Repository: "r", Digest: vs[2].Digest}}
	}
	t.Run("changed, go on", func(t *testing.T) {
		rep, _ := run(t, []digest.Digest{deployed}, ApplyOptions{}, deploy)
		if !rep.InUseChanged || rep.InUseNote != indexChangedNote || len(rep.InUseAdded) != 1 || rep.InUseAdded[0] != vs[2].Digest ||
			len(rep.InUseRemoved) != 0 || rep.Aborted != nil || len(rep.Deleted) != 4 {
			t.Fatalf("%+v", rep)
		}
	})
	t.Run("changed, stop", func(t *testing.T) {
		rep, ft := run(t, []digest.Digest{deployed}, ApplyOptions{StopIfIndexChanged: true}, deploy)
		if !rep.InUseChanged || rep.Aborted == nil || rep.Aborted.Reason != reclaim.AbortInUseChanged || len(ft.deleted) != 1 || ft.deleted[0] != vs[3].Tags[0] {
			t.Fatalf("%+v, deleted %v", rep, ft.deleted)
		}
	})
	t.Run("removed before the first delete", func(t *testing.T) {
		rep, ft := run(t, []digest.Digest{deployed, vs[0].Digest}, ApplyOptions{StopIfIndexChanged: true}, nil)
		if !rep.InUseChanged || len(rep.InUseRemoved) != 1 || rep.Aborted == nil || len(ft.deleted) != 0 {
			t.Fatalf("%+v, deleted %v", rep, ft.deleted)
		}
	})
	t.Run("plan without its index", func(t *testing.T) {
		rep, ft := run(t, nil, ApplyOptions{StopIfIndexChanged: true}, nil)
		if !rep.InUseChanged || rep.Aborted == nil || len(ft.deleted) != 0 {
			t.Fatalf("%+v, deleted %v", rep, ft.deleted)
		}
	})
}
