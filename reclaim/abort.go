package reclaim

// AbortReason is why a run stopped before deleting anything.
type AbortReason string

// The preconditions a run checks before it deletes anything.
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
