package gc

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// preconditionCases fail before anything is read. A collection and a
// reclaimer tick share the check, so both stop with the same reason and
// neither deletes anything.
var preconditionCases = []struct {
	name    string
	setup   func(*fixture)
	want    AbortReason
	backoff bool // the reclaimer tick counts as failing
}{
	{"tracker unreachable", func(f *fixture) { f.tr.sinceErr = fmt.Errorf("%w: dial", ErrTrackerUnavailable) }, AbortRedisUnavailable, true},
	{"tracker lost data", func(f *fixture) { f.tr.sinceErr = ErrNotRecording }, AbortRedisUntrusted, false},
	{"redis may evict", func(f *fixture) { f.tr.sinceErr = fmt.Errorf("%w: allkeys-lru", ErrRedisEvicts) }, AbortRedisEvicts, false},
	{"recording too short", func(f *fixture) { f.tr.since = f.tr.now.Add(-time.Minute) }, AbortRedisRecordingTooShort, false},
	// A marker that cannot be read is no answer: fail closed, both ways.
	{"linkdb marker unreadable", func(f *fixture) {
		f.c.cfg.LinkDBComplete = func(context.Context) (bool, error) { return false, errBoom }
	}, AbortStorageUnreadable, true},
}

func TestPreconditionsStopCollectAndReclaimerAlike(t *testing.T) {
	for _, tc := range preconditionCases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.image("x", nil, "a")
			f.layer("x", "dangling")
			q, orphan := queuedBlob(f, "orphan")
			tc.setup(f)
			f.checkAborts("x", tc.want)

			r := newTestReclaimer(t, f, q, true)
			rep := r.Tick(context.Background())
			if rep.Abort != tc.want || len(rep.Decisions) != 0 || rep.Failed != tc.backoff {
				t.Fatalf("tick abort = %q (%v) failed=%v, want %q failed=%v", rep.Abort, rep.Err, rep.Failed, tc.want, tc.backoff)
			}
			var ae *AbortError
			if _, err := r.Review(context.Background(), orphan); !errors.As(err, &ae) || ae.Reason != tc.want {
				t.Fatalf("Review: %v, want abort %s", err, tc.want)
			}
			if q.claims != 0 || !f.exists(layout.BlobDataPath(orphan)) {
				t.Fatal("an untrusted tick claimed or deleted")
			}
		})
	}
}

// Until the link database is known complete, a collection unlinks but
// deletes no blob, and the reclaimer (which only deletes blobs) waits.
func TestIncompleteLinkDBDeletesNoBlob(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.LinkDBComplete = func(context.Context) (bool, error) { return false, nil } })
	l := f.layer("i", "orphan")
	rep := f.collect("i", RunOptions{})
	if !has(rep.LayersUnlinked, l.Digest) || reasonOf(rep, KindBlob, l.Digest) != LinkDBIncomplete || !f.exists(layout.BlobDataPath(l.Digest)) {
		t.Fatalf("%s", summary(rep))
	}
	// The blob lost its last link: the review queue has it.
	q := newFakeQueue(f.tr.clock)
	q.add(l.Digest, f.tr.clock())
	tick := newTestReclaimer(t, f, q, true).Tick(context.Background())
	if tick.Abort != AbortLinkDBIncomplete || tick.Failed || !f.exists(layout.BlobDataPath(l.Digest)) {
		t.Fatalf("tick = %+v", tick)
	}
}

// queuedBlob stores a blob no repository links and queues it, due now.
func queuedBlob(f *fixture, content string) (*fakeQueue, digest.Digest) {
	q := newFakeQueue(f.tr.clock)
	b := f.blob(content)
	q.add(b.Digest, f.tr.clock())
	return q, b.Digest
}
