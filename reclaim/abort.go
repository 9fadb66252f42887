package reclaim

import "github.com/reclaim-registry/reclaim/internal/enum"

// AbortReason is why a run stopped before deleting anything: a GC run or a
// reclaimer tick (gc.AbortError), a retention run (retention.AbortError).
// Its strings are the API (the "reason" of a GC_ABORTED or RETENTION_ABORTED
// answer, the metrics' labels): a closed set, like Reason.
type AbortReason string

// The preconditions a GC run checks before it deletes anything.
const (
	AbortRedisUnavailable       AbortReason = "redis_unavailable"
	AbortRedisUntrusted         AbortReason = "redis_untrusted"
	AbortRedisRecordingTooShort AbortReason = "redis_recording_too_short"
	AbortRedisEvicts            AbortReason = "redis_evicts"
	AbortManifestUnreadable     AbortReason = "manifest_unreadable"
	AbortStorageUnreadable      AbortReason = "storage_unreadable"
)

// AbortLinkDBIncomplete stops a reclaimer tick: the reverse-link database is
// not known to be complete, so an empty reverse-link list proves nothing.
// It spells the same name as ReasonLinkDBIncomplete, the decision a run
// records for each blob it keeps for that cause.
const AbortLinkDBIncomplete AbortReason = "linkdb_incomplete"

// Why a retention run stops before deleting any more tags
// (retention/failure.go: what could make a run delete a version that runs
// aborts it; what only makes it delete less skips a repository).
const (
	// AbortInUseEmpty: no source declares any image. An empty index means
	// the scanners are not running, not that nothing runs.
	AbortInUseEmpty AbortReason = "inuse_empty"
	// AbortInUseStale: a source was last updated longer ago than the
	// configured maximum age (retention.inusemaxage).
	AbortInUseStale AbortReason = "inuse_stale"
	// AbortInUseUnreadable: the index itself (its list of sources) or the
	// pins cannot be read.
	AbortInUseUnreadable AbortReason = "inuse_unreadable"
	// AbortInUseVersionUnreadable: a manifest the index says is in use
	// cannot be read, so which tagged version it belongs to is unknown.
	AbortInUseVersionUnreadable AbortReason = "inuse_version_unreadable"
	// AbortInUseChanged: the repository's in-use manifests are not the
	// ones its plan saw, and the apply was asked to stop then
	// (stop_if_index_changed). Without that ask, apply goes on: a version
	// that became in use protects itself (the fresh check before each
	// delete), not the versions the policy would keep around it.
	AbortInUseChanged AbortReason = "inuse_changed"
)

var abortReasons = enum.Strings("reclaim.AbortReason",
	AbortRedisUnavailable, AbortRedisUntrusted, AbortRedisRecordingTooShort, AbortRedisEvicts,
	AbortManifestUnreadable, AbortStorageUnreadable, AbortLinkDBIncomplete,
	AbortInUseEmpty, AbortInUseStale, AbortInUseUnreadable, AbortInUseVersionUnreadable, AbortInUseChanged)

// String is the machine name, e.g. "redis_unavailable".
func (a AbortReason) String() string { return abortReasons.String(a) }

// MarshalText encodes the machine name; a reason outside the set is an error.
func (a AbortReason) MarshalText() ([]byte, error) { return abortReasons.MarshalText(a) }

// UnmarshalText decodes a machine name, strictly.
func (a *AbortReason) UnmarshalText(b []byte) error { return abortReasons.UnmarshalText(b, a) }
