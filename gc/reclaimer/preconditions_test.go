package reclaimer

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/reclaim-registry/reclaim/gc/collector"
	"github.com/reclaim-registry/reclaim/gc/internal/gctest"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// preconditionCases fail before anything is read. A reclaimer tick checks
// a collection's preconditions (gc/collector's TestPreconditionsStopCollect
// has the same cases), so both stop with the same reason and neither
// deletes anything.
var preconditionCases = []struct {
	name    string
	setup   func(*fixture)
	want    reclaim.AbortReason
	backoff bool // the reclaimer tick counts as failing
}{
	{"tracker unreachable", func(f *fixture) { f.tr.SinceErr = fmt.Errorf("%w: dial", reclaim.ErrTrackerUnavailable) }, reclaim.AbortRedisUnavailable, true},
	{"tracker lost data", func(f *fixture) { f.tr.SinceErr = reclaim.ErrNotRecording }, reclaim.AbortRedisUntrusted, false},
	{"redis may evict", func(f *fixture) { f.tr.SinceErr = fmt.Errorf("%w: allkeys-lru", reclaim.ErrRedisEvicts) }, reclaim.AbortRedisEvicts, false},
	{"recording too short", func(f *fixture) { f.tr.Since = f.tr.Now.Add(-time.Minute) }, reclaim.AbortRedisRecordingTooShort, false},
	// A marker that cannot be read is no answer: fail closed.
	{"linkdb marker unreadable", func(f *fixture) {
		f.cfg.LinkDBComplete = func(context.Context) (bool, error) { return false, gctest.ErrBoom }
		f.start()
	}, reclaim.AbortStorageUnreadable, true},
}

func TestPreconditionsStopReclaimer(t *testing.T) {
	for _, tc := range preconditionCases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.Image("x", nil, "a")
			f.Layer("x", "dangling")
			q, orphan := queuedBlob(f, "orphan")
			tc.setup(f)

			r := newTestReclaimer(t, f, q, true)
			rep := r.Tick(context.Background())
			if rep.Abort != tc.want || len(rep.Decisions) != 0 || rep.Failed != tc.backoff {
				t.Fatalf("tick abort = %q (%v) failed=%v, want %q failed=%v", rep.Abort, rep.Err, rep.Failed, tc.want, tc.backoff)
			}
			var ae *collector.AbortError
			if _, err := r.Review(context.Background(), orphan); !errors.As(err, &ae) || ae.Reason != tc.want {
				t.Fatalf("Review: %v, want abort %s", err, tc.want)
			}
			if q.Claims != 0 || !f.Exists(layout.BlobDataPath(orphan)) {
				t.Fatal("an untrusted tick claimed or deleted")
			}
		})
	}
}

// Until the link database is known complete, a collection unlinks but
// deletes no blob (gc/collector's TestIncompleteLinkDBDeletesNoBlob), and
// the reclaimer (which only deletes blobs) waits.
func TestIncompleteLinkDBReclaimerWaits(t *testing.T) {
	f := newFixture(t, func(c *collector.Config) {
		c.LinkDBComplete = func(context.Context) (bool, error) { return false, nil }
	})
	l := f.Layer("i", "orphan")
	if _, err := f.c.Collect(context.Background(), "i", collector.RunOptions{}); err != nil {
		t.Fatal(err)
	}
	// The blob lost its last link: the review queue has it.
	q := gctest.NewQueue(f.tr.Clock)
	q.Add(l.Digest, f.tr.Clock())
	tick := newTestReclaimer(t, f, q, true).Tick(context.Background())
	if tick.Abort != reclaim.AbortLinkDBIncomplete || tick.Failed || !f.Exists(layout.BlobDataPath(l.Digest)) {
		t.Fatalf("tick = %+v", tick)
	}
}
