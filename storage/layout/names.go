package layout

import (
	"errors"
	"fmt"
	"time"

	"github.com/opencontainers/go-digest"
)

// LinkKind is which forward link set a reverse link mirrors.
type LinkKind string

// The two forward link sets that keep a blob alive.
const (
	LinkLayer    LinkKind = "_layers"
	LinkManifest LinkKind = "_manifests"
)

// Object is what the access tracker records and GC fences and deletes: a
// blob (Repo == "") or repository Repo's link of kind Kind to it.
type Object struct {
	Blob digest.Digest
	Repo string
	Kind LinkKind
}

func (o Object) String() string {
	if o.Repo == "" {
		return o.Blob.String()
	}
	return fmt.Sprintf("%s %s %s", o.Repo, o.Kind, o.Blob)
}

// RepoLink is one reverse link: repository Repo links the blob as a layer
// (LinkLayer) or as a manifest revision (LinkManifest).
type RepoLink struct {
	Repo string
	Kind LinkKind
	// Problem is set when what sits at the link path is not a link file (a
	// directory, an entry the listing shows but Stat cannot see). Such a
	// link still counts as present: callers keep the blob and report it.
	Problem string
}

// ReviewItem is one blob a reclaimer claimed from the review queue and
// holds until its lease runs out.
type ReviewItem struct {
	Blob digest.Digest
	// Due is when the item was due (before the claim).
	Due time.Time
	// Lease is the queue's token for the claim: Done and Requeue compare
	// against it, so a claim that ran out cannot touch a newer one.
	Lease int64
}

// Errors of the access tracker, shared by the middleware, GC and the link
// database tools so that none of them translates another's.
var (
	// ErrFenced: registry side, the object is being deleted by GC; GC side,
	// another GC step holds the fence.
	ErrFenced = errors.New("object is fenced for deletion")
	// ErrRecentlyAccessed: the object was accessed within the window.
	ErrRecentlyAccessed = errors.New("object accessed within the protection window")
	// ErrFenceLost: a fence expired or was taken away before the delete it guards.
	ErrFenceLost = errors.New("fence expired before the delete")
	// ErrNotRecording: the recording epoch is missing (Redis lost its data
	// or never recorded); access records cannot prove anything.
	ErrNotRecording = errors.New("access tracker is not recording (epoch missing)")
	// ErrRedisEvicts: Redis may evict access records (its maxmemory-policy
	// is not noeviction), so their absence proves nothing.
	ErrRedisEvicts = errors.New("redis may evict access records (maxmemory-policy is not noeviction)")
	// ErrRepositoryBusy: another GC run holds the repository (on any instance).
	ErrRepositoryBusy = errors.New("a collection is already running for this repository")
	// ErrLockLost: a run's repository lock expired or was taken away.
	ErrLockLost = errors.New("repository lock lost")
	// ErrTrackerUnavailable wraps any failure to reach the tracker's Redis.
	ErrTrackerUnavailable = errors.New("access tracker (redis) unavailable")
)
