package collector

import (
	"context"
	"testing"

	"github.com/reclaim-registry/reclaim/reclaim"
)

// deletionLog is a DeletionSink that keeps what it hears.
type deletionLog []reclaim.Deletions

func (l *deletionLog) Deleted(_ context.Context, d reclaim.Deletions) { *l = append(*l, d) }

// A real run tells its sink what it deleted, once, in the order of its
// report (manifests, layer links, blobs); a dry run, and a run that deletes
// nothing, tell nothing.
func TestRunTellsDeletions(t *testing.T) {
	var told deletionLog
	f := newFixture(t, func(c *Config) { c.Deletions = &told })
	a := f.Image("p", nil, "a")
	f.Tag("p", "keep", f.Image("p", nil, "b").Digest)
	rep := f.collect("p", RunOptions{}) // a dry run, then a real one
	if len(told) != 1 {
		t.Fatalf("told %d times, want once (the real run)", len(told))
	}
	d := told[0]
	if d.Source != "gc" || d.RunID != rep.RunID || d.Instance != f.c.Instance() || d.Instance == "" {
		t.Fatalf("told %+v for run %s", d, rep.RunID)
	}
	var want []reclaim.Deletion
	for _, l := range []struct {
		kind reclaim.ObjectKind
		n    int
	}{{reclaim.KindManifest, len(rep.ManifestsDeleted)}, {reclaim.KindLayerLink, len(rep.LayersUnlinked)}, {reclaim.KindBlob, len(rep.BlobsDeleted)}} {
		for range l.n {
			want = append(want, reclaim.Deletion{Kind: l.kind})
		}
	}
	if len(d.Objects) != len(want) || len(rep.ManifestsDeleted) != 1 || rep.ManifestsDeleted[0] != a.Digest {
		t.Fatalf("told %+v, report %s", d.Objects, summary(rep))
	}
	for i, o := range d.Objects {
		if o.Kind != want[i].Kind || o.Repository != "p" || o.Reason != reclaim.ReasonUnreferenced.String() {
			t.Errorf("deletion %d: %+v, want a %s", i, o, want[i].Kind)
		}
	}
	if d.Objects[0].Digest != a.Digest || d.Objects[0].MediaType == "" {
		t.Errorf("the manifest's deletion: %+v", d.Objects[0])
	}
	f.collect("p", RunOptions{})
	if len(told) != 1 {
		t.Fatalf("a run that deleted nothing told %+v", told[1:])
	}
}
