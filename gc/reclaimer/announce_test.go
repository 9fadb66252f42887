package reclaimer

import (
	"context"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/gc/internal/gctest"
	"github.com/reclaim-registry/reclaim/reclaim"
)

// deletionLog is a DeletionSink that keeps what it hears.
type deletionLog []reclaim.Deletions

func (l *deletionLog) Deleted(_ context.Context, d reclaim.Deletions) { *l = append(*l, d) }

// A tick tells its sink the blobs it deleted, once, in the order of its
// claim; a blob found already gone or kept is not told, and a tick that
// deleted nothing tells nothing.
func TestTickTellsDeletions(t *testing.T) {
	f := newFixture(t)
	q := gctest.NewQueue(f.tr.Clock)
	now := f.tr.Clock()
	first, second := f.Blob("orphan one"), f.Blob("orphan two")
	linked := f.Layer("app", "still linked")
	for _, d := range []digest.Digest{first.Digest, digest.FromString("gone"), linked.Digest, second.Digest} {
		q.Add(d, now)
	}
	var told deletionLog
	r, err := f.reclaimer(q, Config{Enabled: true, Interval: 10 * time.Millisecond, Batch: 10, Workers: 1, Deletions: &told})
	if err != nil {
		t.Fatal(err)
	}
	rep := r.Tick(context.Background())
	var want []digest.Digest
	for _, d := range rep.Decisions { // the claim's order
		if d.Reason == reclaim.ReasonUnreferenced {
			want = append(want, d.Digest)
		}
	}
	if len(told) != 1 || len(want) != 2 || len(told[0].Objects) != 2 || told[0].Source != "reclaimer" || told[0].Instance != f.c.Instance() || told[0].RunID == "" {
		t.Fatalf("told %+v, tick %+v", told, rep.Decisions)
	}
	for i, o := range told[0].Objects {
		if o.Kind != reclaim.KindBlob || o.Digest != want[i] || o.Repository != "" || o.Size == 0 {
			t.Errorf("deletion %d: %+v, want blob %s", i, o, want[i])
		}
	}
	r.Tick(context.Background())
	if len(told) != 1 {
		t.Fatalf("a tick that deleted nothing told %+v", told[1:])
	}
}
