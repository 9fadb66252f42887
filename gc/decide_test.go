package gc

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/reclaim-registry/reclaim/reclaim"
)

// snapBuilder makes snapshots in memory, for decide: no storage involved.
// Every object has a name, and the wanted decisions are written with it.
type snapBuilder struct {
	s     *Snapshot
	names map[digest.Digest]string
}

const testRepo = "r"

func newSnapBuilder() *snapBuilder {
	return &snapBuilder{s: NewSnapshot(testRepo), names: map[digest.Digest]string{}}
}

func (b *snapBuilder) d(name string) digest.Digest {
	d := digest.FromString(name)
	b.names[d] = name
	return d
}

func (b *snapBuilder) manifest(name, mediaType string, known bool, refs ...digest.Digest) digest.Digest {
	d := b.d(name)
	b.s.Revisions[d] = &Manifest{Digest: d, MediaType: mediaType, Known: known, Refs: refs, Size: 100}
	return d
}

// image adds a manifest whose layers are also layer links of the repository.
func (b *snapBuilder) image(name string, layers ...string) digest.Digest {
	var refs []digest.Digest
	for _, l := range layers {
		refs = append(refs, b.layer(l))
	}
	return b.manifest(name, v1.MediaTypeImageManifest, true, refs...)
}

func (b *snapBuilder) index(name string, children ...digest.Digest) digest.Digest {
	return b.manifest(name, v1.MediaTypeImageIndex, true, children...)
}

func (b *snapBuilder) referrer(name string, subject digest.Digest) digest.Digest {
	d := b.image(name)
	b.s.Revisions[d].Subject = subject
	return d
}

func (b *snapBuilder) layer(name string) digest.Digest {
	d := b.d(name)
	b.s.Layers[d] = true
	return d
}

func (b *snapBuilder) tag(tag string, d digest.Digest) { b.s.Tags[tag] = d }

// testPolicy is a run of testRepo by an up-to-date tracker, window 1h.
func testPolicy() Policy {
	return Policy{Repo: testRepo, Now: t0.Add(48 * time.Hour), Window: time.Hour, LinkDBComplete: true, LinkDBNote: "incomplete"}
}

// allFacts is what gather would read from an idle registry: no pins, no
// access records, no other links, every blob 10 bytes.
func allFacts(s *Snapshot, pol Policy) *Facts {
	f := NewFacts()
	manifests, layers, blobs := Wanted(s, pol)
	for _, d := range manifests {
		f.Pins[d] = Fact[bool]{}
		f.Access[reclaim.Object{Blob: d, Repo: pol.Repo, Kind: reclaim.LinkManifest}] = Fact[time.Time]{}
	}
	for _, d := range layers {
		f.Access[reclaim.Object{Blob: d, Repo: pol.Repo, Kind: reclaim.LinkLayer}] = Fact[time.Time]{}
	}
	for _, d := range blobs {
		f.Links[d] = Fact[[]reclaim.RepoLink]{}
		f.Access[reclaim.Object{Blob: d}] = Fact[time.Time]{}
		f.Sizes[d] = Fact[int64]{V: 10}
	}
	return f
}

func manifestLink(d digest.Digest) reclaim.Object {
	return reclaim.Object{Blob: d, Repo: testRepo, Kind: reclaim.LinkManifest}
}
func layerLink(d digest.Digest) reclaim.Object {
	return reclaim.Object{Blob: d, Repo: testRepo, Kind: reclaim.LinkLayer}
}

var (
	recently = Fact[time.Time]{V: t0.Add(48*time.Hour - time.Minute)}
	long     = func(h int) Fact[time.Time] { return Fact[time.Time]{V: t0.Add(time.Duration(h) * time.Hour)} }
	failed   = func() Fact[time.Time] { return Fact[time.Time]{Err: errBoom} }
)

type decideCase struct {
	name  string
	snap  func(b *snapBuilder)
	pol   func(p *Policy, b *snapBuilder)
	facts func(f *Facts, b *snapBuilder)
	// want is every decision, "<kind> <name>" -> reason; details holds a
	// part of the detail where it matters.
	want    map[string]reclaim.Reason
	details map[string]string
}

var decideCases = []decideCase{
	{name: "tagged image keeps its layers",
		snap:    func(b *snapBuilder) { b.tag("v1", b.image("img", "a", "b")) },
		want:    map[string]reclaim.Reason{"manifest img": reclaim.ReasonTagged, "layer_link a": reclaim.ReasonReferenced, "layer_link b": reclaim.ReasonReferenced},
		details: map[string]string{"manifest img": "tag v1"}},
	{name: "untagged image goes with its layers and blobs",
		snap: func(b *snapBuilder) { b.image("img", "a") },
		want: map[string]reclaim.Reason{"manifest img": reclaim.ReasonUnreferenced, "layer_link a": reclaim.ReasonUnreferenced,
			"blob img": reclaim.ReasonUnreferenced, "blob a": reclaim.ReasonUnreferenced}},
	{name: "index children and referrers follow the tag",
		snap: func(b *snapBuilder) {
			ix := b.index("ix", b.image("child"))
			b.referrer("sig", ix)
			b.tag("v1", ix)
		},
		want:    map[string]reclaim.Reason{"manifest ix": reclaim.ReasonTagged, "manifest child": reclaim.ReasonIndexChild, "manifest sig": reclaim.ReasonReferrer},
		details: map[string]string{"manifest child": "kept by sha256:"}},
	{name: "recently accessed untagged manifest",
		snap:  func(b *snapBuilder) { b.image("img", "a") },
		facts: func(f *Facts, b *snapBuilder) { f.Access[manifestLink(b.d("img"))] = recently },
		want:  map[string]reclaim.Reason{"manifest img": reclaim.ReasonRecentlyAccessed, "layer_link a": reclaim.ReasonReferenced}},
	{name: "pinned",
		snap:  func(b *snapBuilder) { b.image("img", "a") },
		pol:   func(p *Policy, _ *snapBuilder) { p.Pins = true },
		facts: func(f *Facts, b *snapBuilder) { f.Pins[b.d("img")] = Fact[bool]{V: true} },
		want:  map[string]reclaim.Reason{"manifest img": reclaim.ReasonPinned, "layer_link a": reclaim.ReasonReferenced}},
	{name: "pin check fails",
		snap:    func(b *snapBuilder) { b.image("img", "a") },
		pol:     func(p *Policy, _ *snapBuilder) { p.Pins = true },
		facts:   func(f *Facts, b *snapBuilder) { f.Pins[b.d("img")] = Fact[bool]{Err: errBoom} },
		want:    map[string]reclaim.Reason{"manifest img": reclaim.ReasonCheckFailed, "layer_link a": reclaim.ReasonReferenced},
		details: map[string]string{"manifest img": "pin check: boom"}},
	{name: "access record unreadable",
		snap:    func(b *snapBuilder) { b.image("img", "a") },
		facts:   func(f *Facts, b *snapBuilder) { f.Access[manifestLink(b.d("img"))] = failed() },
		want:    map[string]reclaim.Reason{"manifest img": reclaim.ReasonCheckFailed, "layer_link a": reclaim.ReasonReferenced},
		details: map[string]string{"manifest img": "access record: boom"}},
	{name: "a fact nobody read keeps the object",
		snap:    func(b *snapBuilder) { b.image("img", "a") },
		facts:   func(f *Facts, b *snapBuilder) { delete(f.Access, manifestLink(b.d("img"))) },
		want:    map[string]reclaim.Reason{"manifest img": reclaim.ReasonCheckFailed, "layer_link a": reclaim.ReasonReferenced},
		details: map[string]string{"manifest img": ErrNoFact.Error()}},
	{name: "keep-untagged policy",
		snap: func(b *snapBuilder) { b.image("img", "a") },
		pol:  func(p *Policy, _ *snapBuilder) { p.KeepUntagged = true },
		want: map[string]reclaim.Reason{"manifest img": reclaim.ReasonPolicyKeepUntagged, "layer_link a": reclaim.ReasonReferenced}},
	{name: "unknown media type keeps the repository",
		snap: func(b *snapBuilder) {
			b.manifest("odd", "application/x-odd", false)
			b.image("img", "a")
			b.layer("stray")
		},
		want: map[string]reclaim.Reason{"manifest odd": reclaim.ReasonUnknownMediaType, "manifest img": reclaim.ReasonUnknownManifestKept,
			"layer_link a": reclaim.ReasonReferenced, "layer_link stray": reclaim.ReasonUnknownManifestKept}},
	{name: "layer link of a push in progress",
		snap:  func(b *snapBuilder) { b.layer("pushing"); b.layer("stale") },
		facts: func(f *Facts, b *snapBuilder) { f.Access[layerLink(b.d("pushing"))] = recently },
		want: map[string]reclaim.Reason{"layer_link pushing": reclaim.ReasonRecentlyAccessed, "layer_link stale": reclaim.ReasonUnreferenced,
			"blob stale": reclaim.ReasonUnreferenced}},
	{name: "layer access unreadable",
		snap:    func(b *snapBuilder) { b.layer("l") },
		facts:   func(f *Facts, b *snapBuilder) { f.Access[layerLink(b.d("l"))] = failed() },
		want:    map[string]reclaim.Reason{"layer_link l": reclaim.ReasonCheckFailed},
		details: map[string]string{"layer_link l": "boom"}},
	{name: "shared blob",
		snap: func(b *snapBuilder) { b.layer("shared") },
		facts: func(f *Facts, b *snapBuilder) {
			f.Links[b.d("shared")] = Fact[[]reclaim.RepoLink]{V: []reclaim.RepoLink{{Repo: testRepo, Kind: reclaim.LinkLayer}, {Repo: "other", Kind: reclaim.LinkLayer}}}
		},
		want:    map[string]reclaim.Reason{"layer_link shared": reclaim.ReasonUnreferenced, "blob shared": reclaim.ReasonLinkedElsewhere},
		details: map[string]string{"blob shared": "other"}},
	{name: "still linked here by a link the run keeps",
		snap: func(b *snapBuilder) { b.layer("l") },
		facts: func(f *Facts, b *snapBuilder) {
			f.Links[b.d("l")] = Fact[[]reclaim.RepoLink]{V: []reclaim.RepoLink{{Repo: testRepo, Kind: reclaim.LinkManifest}}}
		},
		want:    map[string]reclaim.Reason{"layer_link l": reclaim.ReasonUnreferenced, "blob l": reclaim.ReasonStillLinked},
		details: map[string]string{"blob l": "_manifests"}},
	{name: "unreadable link keeps the blob",
		snap: func(b *snapBuilder) { b.layer("l") },
		facts: func(f *Facts, b *snapBuilder) {
			f.Links[b.d("l")] = Fact[[]reclaim.RepoLink]{V: []reclaim.RepoLink{{Repo: "other", Kind: reclaim.LinkLayer, Problem: "a directory"}}}
		},
		want:    map[string]reclaim.Reason{"layer_link l": reclaim.ReasonUnreferenced, "blob l": reclaim.ReasonCheckFailed},
		details: map[string]string{"blob l": "reverse link of other _layers: a directory; kept as linked"}},
	{name: "an unreadable link the run removes does not count",
		snap: func(b *snapBuilder) { b.layer("l") },
		facts: func(f *Facts, b *snapBuilder) {
			f.Links[b.d("l")] = Fact[[]reclaim.RepoLink]{V: []reclaim.RepoLink{{Repo: testRepo, Kind: reclaim.LinkLayer, Problem: "dangling"}}}
		},
		want: map[string]reclaim.Reason{"layer_link l": reclaim.ReasonUnreferenced, "blob l": reclaim.ReasonUnreferenced}},
	{name: "reverse links unreadable",
		snap:    func(b *snapBuilder) { b.layer("l") },
		facts:   func(f *Facts, b *snapBuilder) { f.Links[b.d("l")] = Fact[[]reclaim.RepoLink]{Err: errBoom} },
		want:    map[string]reclaim.Reason{"layer_link l": reclaim.ReasonUnreferenced, "blob l": reclaim.ReasonCheckFailed},
		details: map[string]string{"blob l": "reverse links: boom"}},
	{name: "incomplete link database keeps every blob",
		snap:    func(b *snapBuilder) { b.image("img", "a") },
		pol:     func(p *Policy, _ *snapBuilder) { p.LinkDBComplete = false },
		want:    map[string]reclaim.Reason{"manifest img": reclaim.ReasonUnreferenced, "layer_link a": reclaim.ReasonUnreferenced, "blob img": reclaim.ReasonLinkDBIncomplete, "blob a": reclaim.ReasonLinkDBIncomplete},
		details: map[string]string{"blob a": "incomplete"}},
	{name: "blob accessed through another repository",
		snap:  func(b *snapBuilder) { b.layer("hot") },
		facts: func(f *Facts, b *snapBuilder) { f.Access[reclaim.Object{Blob: b.d("hot")}] = recently },
		want:  map[string]reclaim.Reason{"layer_link hot": reclaim.ReasonUnreferenced, "blob hot": reclaim.ReasonRecentlyAccessed}},
	{name: "blob data already gone",
		snap: func(b *snapBuilder) { b.layer("l") },
		facts: func(f *Facts, b *snapBuilder) {
			f.Sizes[b.d("l")] = Fact[int64]{} // what the collector records for data that is gone
		},
		want: map[string]reclaim.Reason{"layer_link l": reclaim.ReasonUnreferenced, "blob l": reclaim.ReasonUnreferenced}},
	{name: "blob stat fails",
		snap:    func(b *snapBuilder) { b.layer("l") },
		facts:   func(f *Facts, b *snapBuilder) { f.Sizes[b.d("l")] = Fact[int64]{Err: errBoom} },
		want:    map[string]reclaim.Reason{"layer_link l": reclaim.ReasonUnreferenced, "blob l": reclaim.ReasonCheckFailed},
		details: map[string]string{"blob l": "stat: boom"}},
	{name: "cap: the oldest go, the newest is capped with what it keeps",
		snap: func(b *snapBuilder) { b.image("old", "l-old"); b.image("mid", "l-mid"); b.image("new", "l-new") },
		pol:  func(p *Policy, _ *snapBuilder) { p.Cap = 2 },
		facts: func(f *Facts, b *snapBuilder) {
			for i, n := range []string{"old", "mid", "new"} {
				f.Access[manifestLink(b.d(n))] = long(i)
			}
		},
		want: map[string]reclaim.Reason{"manifest old": reclaim.ReasonUnreferenced, "manifest mid": reclaim.ReasonUnreferenced, "manifest new": reclaim.ReasonCapped,
			"layer_link l-old": reclaim.ReasonCapped, "layer_link l-mid": reclaim.ReasonCapped, "layer_link l-new": reclaim.ReasonReferenced,
			"blob old": reclaim.ReasonUnreferenced, "blob mid": reclaim.ReasonUnreferenced}},
	{name: "an applied plan deletes only what it lists",
		snap: func(b *snapBuilder) { b.image("listed", "a"); b.image("new"); b.layer("stray") },
		pol: func(p *Policy, b *snapBuilder) {
			listed := map[key]bool{{reclaim.KindManifest, b.d("listed")}: true, {reclaim.KindLayerLink, b.d("a")}: true}
			p.Only = func(k reclaim.ObjectKind, d digest.Digest) bool { return listed[key{k, d}] }
		},
		want: map[string]reclaim.Reason{"manifest listed": reclaim.ReasonUnreferenced, "manifest new": reclaim.ReasonNotInPlan, "layer_link a": reclaim.ReasonUnreferenced,
			"layer_link stray": reclaim.ReasonNotInPlan, "blob listed": reclaim.ReasonNotInPlan, "blob a": reclaim.ReasonNotInPlan}},
}

func TestDecide(t *testing.T) {
	for _, tc := range decideCases {
		t.Run(tc.name, func(t *testing.T) {
			b := newSnapBuilder()
			tc.snap(b)
			pol := testPolicy()
			if tc.pol != nil {
				tc.pol(&pol, b)
			}
			f := allFacts(b.s, pol)
			if tc.facts != nil {
				tc.facts(f, b)
			}
			p := Decide(b.s, f, pol)
			got := map[string]reclaim.Reason{}
			for _, d := range p.Decisions {
				k := string(d.Kind) + " " + b.names[d.Digest]
				if _, dup := got[k]; dup {
					t.Fatalf("two decisions for %s", k)
				}
				got[k] = d.Reason
				if want, ok := tc.details[k]; ok && !strings.Contains(d.Detail, want) {
					t.Errorf("%s: detail %q, want it to contain %q", k, d.Detail, want)
				}
			}
			if !maps.Equal(got, tc.want) {
				t.Fatalf("decisions\n got %v\nwant %v", got, tc.want)
			}
			checkPlanLists(t, p)
			if again := Decide(b.s, f, pol); !equalPlans(again, p) {
				t.Fatal("decide is not deterministic")
			}
		})
	}
}

// checkPlanLists: the delete lists hold exactly the deletions.
func checkPlanLists(t *testing.T, p *Outcome) {
	t.Helper()
	lists := map[reclaim.ObjectKind][]digest.Digest{reclaim.KindManifest: p.Manifests, reclaim.KindLayerLink: p.Layers, reclaim.KindBlob: p.Blobs}
	n := 0
	for _, d := range p.Decisions {
		if d.Deleted() {
			n++
			if !has(lists[d.Kind], d.Digest) {
				t.Errorf("%s %s deleted but not listed", d.Kind, d.Digest)
			}
		}
	}
	if n != len(p.Manifests)+len(p.Layers)+len(p.Blobs) {
		t.Errorf("%d deletions, lists hold %d", n, len(p.Manifests)+len(p.Layers)+len(p.Blobs))
	}
}

func equalPlans(a, b *Outcome) bool {
	return summaryOf(a) == summaryOf(b)
}

func summaryOf(p *Outcome) string {
	var sb strings.Builder
	for _, d := range p.Decisions {
		sb.WriteString(string(d.Kind) + d.Digest.String() + d.Reason.String() + d.Detail + "\n")
	}
	for _, l := range [][]digest.Digest{p.Manifests, p.Layers, p.Blobs} {
		for _, d := range l {
			sb.WriteString(d.String())
		}
	}
	return sb.String()
}

// A parent is deleted before its children, a subject before its referrers.
func TestDecideDeletesParentsFirst(t *testing.T) {
	b := newSnapBuilder()
	child := b.image("child")
	ix := b.index("ix", child)
	sig := b.referrer("sig", ix)
	p := Decide(b.s, allFacts(b.s, testPolicy()), testPolicy())
	pos := map[digest.Digest]int{}
	for i, d := range p.Manifests {
		pos[d] = i
	}
	if len(pos) != 3 || pos[ix] > pos[child] || pos[ix] > pos[sig] {
		t.Fatalf("order %v: ix %s child %s sig %s", p.Manifests, ix, child, sig)
	}
}

var (
	t0      = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	errBoom = errors.New("boom")
)

func has(ds []digest.Digest, d digest.Digest) bool { return slices.Contains(ds, d) }
