package collector

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/reclaim-registry/reclaim/gc/internal/gctest"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/reclaim/gcrun"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// preconditionCases fail before anything is read. A collection and a
// reclaimer tick share the check (gc/reclaimer's
// TestPreconditionsStopReclaimer), so both stop with the same reason and
// neither deletes anything. A dry run (a preview) of a case that leaves
// Redis readable plans anyway and lists the blocker (previews is true).
var preconditionCases = []struct {
	name     string
	setup    func(*fixture)
	want     reclaim.AbortReason
	previews bool // a dry run plans and lists the blocker
}{
	{"tracker unreachable", func(f *fixture) { f.tr.SinceErr = fmt.Errorf("%w: dial", reclaim.ErrTrackerUnavailable) }, reclaim.AbortRedisUnavailable, false},
	{"tracker lost data", func(f *fixture) { f.tr.SinceErr = reclaim.ErrNotRecording }, reclaim.AbortRedisUntrusted, true},
	{"redis may evict", func(f *fixture) { f.tr.SinceErr = fmt.Errorf("%w: allkeys-lru", reclaim.ErrRedisEvicts) }, reclaim.AbortRedisEvicts, true},
	{"recording too short", func(f *fixture) { f.tr.Since = f.tr.Now.Add(-time.Minute) }, reclaim.AbortRedisRecordingTooShort, true},
	// A marker that cannot be read is no answer: fail closed, both ways.
	{"linkdb marker unreadable", func(f *fixture) {
		f.c.cfg.LinkDBComplete = func(context.Context) (bool, error) { return false, gctest.ErrBoom }
	}, reclaim.AbortStorageUnreadable, false},
}

func TestPreconditionsStopCollect(t *testing.T) {
	for _, tc := range preconditionCases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.Image("x", nil, "a")
			f.Layer("x", "dangling")
			f.Blob("orphan")
			tc.setup(f)
			if tc.previews {
				f.checkPreviews("x", tc.want)
			} else {
				f.checkAborts("x", tc.want)
			}
		})
	}
}

// Until the link database is known complete, a collection unlinks but
// deletes no blob (and the reclaimer, which only deletes blobs, waits:
// gc/reclaimer's TestIncompleteLinkDBReclaimerWaits).
func TestIncompleteLinkDBDeletesNoBlob(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.LinkDBComplete = func(context.Context) (bool, error) { return false, nil } })
	l := f.Layer("i", "orphan")
	rep := f.collect("i", RunOptions{})
	if !has(rep.LayersUnlinked, l.Digest) || reasonOf(rep, reclaim.KindBlob, l.Digest) != reclaim.ReasonLinkDBIncomplete || !f.Exists(layout.BlobDataPath(l.Digest)) {
		t.Fatalf("%s", summary(rep))
	}
	if b := rep.Blockers; len(b) != 1 || b[0].Reason != reclaim.AbortLinkDBIncomplete || b[0].Blocks != BlocksBlobs {
		t.Fatalf("blockers %+v, want linkdb_incomplete on blobs", b)
	}
}

// checkPreviews checks that a real run of repo aborts for want and deletes
// nothing, while a dry run plans anyway and lists want as a run-wide
// blocker, and that Preview stores that plan.
func (f *fixture) checkPreviews(repo string, want reclaim.AbortReason) {
	t := f.T
	t.Helper()
	before := f.Tree()
	rep, err := f.c.Collect(context.Background(), repo, RunOptions{})
	var ae *AbortError
	if !errors.As(err, &ae) || ae.Reason != want || rep.Status != gcrun.StatusAborted || len(rep.ManifestsDeleted) != 0 {
		t.Fatalf("real run: err %v, report %+v; want abort %s", err, rep, want)
	}
	dry, err := f.c.Collect(context.Background(), repo, RunOptions{DryRun: true})
	if err != nil || dry.Status != gcrun.StatusDone {
		t.Fatalf("dry run: %v %+v", err, dry)
	}
	if len(dry.Blockers) != 1 || dry.Blockers[0].Reason != want || dry.Blockers[0].Blocks != BlocksRun || dry.Blockers[0].Detail == "" {
		t.Fatalf("dry run blockers %+v, want one %s", dry.Blockers, want)
	}
	// the untagged image and the dangling layer
	if len(dry.ManifestsDeleted) != 1 || len(dry.LayersUnlinked) != 3 || len(dry.BlobsDeleted) != 4 {
		t.Fatalf("dry run plan: %s", summary(dry))
	}
	plan, prev, err := f.c.Preview(context.Background(), repo, RunOptions{})
	if err != nil || len(plan.Layers) != 3 || len(prev.Blockers) != 1 {
		t.Fatalf("preview: %v %+v %+v", err, plan, prev)
	}
	if f.Tree() != before {
		t.Fatal("a blocked run changed storage")
	}
}

// A preview while Redis has recorded for less than the window says until
// when; the blocker clears by itself then.
func TestPreviewSaysUntilWhenRecordingIsTooShort(t *testing.T) {
	f := newFixture(t)
	f.Image("x", nil, "a")
	f.Layer("x", "dangling")
	f.tr.Since = f.tr.Now.Add(-time.Minute)
	dry, err := f.c.Collect(context.Background(), "x", RunOptions{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	rep := dry
	want := f.tr.Since.Add(time.Hour)
	if b := rep.Blockers; len(b) != 1 || b[0].Until == nil || !b[0].Until.Equal(want) {
		t.Fatalf("blockers %+v, want until %s", b, want)
	}
	f.tr.Mu.Lock()
	f.tr.Now = want
	f.tr.Mu.Unlock()
	rep, err = f.c.Collect(context.Background(), "x", RunOptions{})
	if err != nil || len(rep.Blockers) != 0 || len(rep.LayersUnlinked) == 0 ||
		!sameDigests(rep.ManifestsDeleted, dry.ManifestsDeleted) || !sameDigests(rep.LayersUnlinked, dry.LayersUnlinked) ||
		!sameDigests(rep.BlobsDeleted, dry.BlobsDeleted) {
		t.Fatalf("at %s: %v\nreal: %s\npreview: %s", want, err, summary(rep), summary(dry))
	}
}
