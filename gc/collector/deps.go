package collector

import (
	"context"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/reclaim/gcrun"
	"github.com/reclaim-registry/reclaim/reclaim/trashentry"
)

// Tracker is the part of the access tracker (Redis) a run needs. Errors wrap
// reclaim's ErrFenced, ErrRecentlyAccessed, ErrNotRecording, ErrRedisEvicts,
// ErrTrackerUnavailable where they apply, and ErrRepositoryBusy from
// LockRepository.
type Tracker interface {
	// RecordingSince is when the tracker started recording access. Only
	// an object whose link is older than that plus the window can be judged
	// "not accessed within the window". ErrRedisEvicts while records may
	// be evicted: then no run may trust their absence.
	RecordingSince(ctx context.Context) (time.Time, error)
	// LastAccess of o; ok is false when there is no record.
	LastAccess(ctx context.Context, o reclaim.Object) (t time.Time, ok bool, err error)
	// Fence o for lease unless it was accessed within window. While the
	// fence holds, every operation that would make o referenced fails or
	// waits.
	Fence(ctx context.Context, o reclaim.Object, window, lease time.Duration) (reclaim.Hold, error)
	// LockRepository allows one run per repository across all instances.
	// The lock is renewed until unlock; held is ctx, cancelled as soon as
	// the lock is known lost (expired, taken away, not renewable), and the
	// run works under it.
	LockRepository(ctx context.Context, repo string, lease time.Duration) (held context.Context, unlock func(), err error)
}

// LinkIndex lists a blob's reverse links: the repositories that link it.
// A missing blob lists as empty; any other failure is an error (fail closed).
// Whatever sits at a link path is listed, with Problem set when it is not a
// link file, never left out.
type LinkIndex interface {
	List(ctx context.Context, blob digest.Digest) ([]reclaim.RepoLink, error)
	// ListFor returns, when a repository other than repo links blob, at
	// least one such link (a walk may stop there); otherwise every link,
	// as List. Its cost does not grow with how many repositories link the
	// blob: one other link keeps a blob, so a run's decisions need no
	// more. An index with no cheaper walk may answer as List.
	ListFor(ctx context.Context, blob digest.Digest, repo string) ([]reclaim.RepoLink, error)
}

// LinkRepairer writes a reverse link (storage/linkdb's ReverseLinks.Put,
// the same write the middleware and rebuild make). Writing one is always
// safe: an extra reverse link only makes GC keep more, and one whose
// forward link is gone is a leak that `linkdb rebuild` removes.
// Has is false only when nothing is at the link path; a malformed link
// or a failed read is an error, never "absent".
type LinkRepairer interface {
	Has(ctx context.Context, blob digest.Digest, l reclaim.RepoLink) (bool, error)
	Put(ctx context.Context, blob digest.Digest, l reclaim.RepoLink) error
}

// Pinner says whether an untagged manifest must be kept anyway (a deploy
// record, a legal hold). This is where deploy-state pins plug in.
type Pinner interface {
	Pinned(ctx context.Context, repo string, manifest digest.Digest) (bool, error)
}

// TrashHolder writes the trash's holds (package trash). While one is
// configured, a run writes a hold before each delete, and a blob no link
// and no hold keeps is held instead of deleted: its data stays until the
// hold expires and is purged (Orphans.Purge).
type TrashHolder interface {
	// Hold records e durably on the blob e.Digest and returns it with its
	// ID, Removed and Expires set.
	Hold(ctx context.Context, e trashentry.Entry) (trashentry.Entry, error)
	// Drop removes a hold whose delete did not happen, best effort (a
	// hold left on a linked object only keeps data longer).
	Drop(ctx context.Context, e trashentry.Entry) error
	// Keep is how long an entry stays restorable.
	Keep() time.Duration
}

// Evictor drops a deleted blob from every blob descriptor cache, so that no
// replica answers "exists" for a blob that is gone.
type Evictor interface {
	Evict(ctx context.Context, blob digest.Digest) error
}

// Clock is the clock the tracker's access records use (Redis server
// time). A run compares records against it instead of the local clock, so
// clock skew between instances cannot shrink the window (Config.Clock).
type Clock interface {
	Now(ctx context.Context) (time.Time, error)
}

// RunRecorder keeps run records where every instance reads them, so that a
// run whose process died is found ("interrupted") instead of vanishing with
// the process (Config.Runs).
type RunRecorder interface {
	// BeginRun is LockRepository that also records run id as running
	// under the lock, in one step.
	BeginRun(ctx context.Context, repo, id string, started time.Time, lease time.Duration) (gcrun.Handle, error)
	// LoadRun reads run id. A record that says running while its lock is
	// not held by it is marked interrupted first (compare-and-swap: of two
	// racing readers both return the winner's state); marker says who
	// marked it. ok is false for an unknown id.
	LoadRun(ctx context.Context, id, marker string) (st gcrun.State, ok bool, err error)
	// RepositoryRuns reads repo's recent runs, newest first, marking dead
	// ones as LoadRun does.
	RepositoryRuns(ctx context.Context, repo, marker string) ([]gcrun.State, error)
	// RecentRuns reads the registry's most recent runs, of every
	// repository and instance, newest first, marking dead ones as LoadRun
	// does.
	RecentRuns(ctx context.Context, n int, marker string) ([]gcrun.State, error)
	// MarkReconciled claims the reconciliation of interrupted run id for
	// run by; false when it is not interrupted or already claimed.
	MarkReconciled(ctx context.Context, repo, id, by string) (bool, error)
}

// Enqueuer queues blobs for the reclaimer's review.
type Enqueuer interface {
	Enqueue(ctx context.Context, delay time.Duration, blobs ...digest.Digest) error
}

// FreedCounter sums (Config.Freed), per day and over every instance, what
// collects and reclaimer ticks deleted (the console's freed today and this
// week; runs themselves are kept 24 hours).
type FreedCounter interface {
	CountFreed(ctx context.Context, at time.Time, bytes int64, objects int) error
}
