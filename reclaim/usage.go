package reclaim

import "time"

// Usage is one repository's reclaimable-bytes estimate, computed by gc
// (gc/collector/usage.go) and kept in Redis (redisstate/usage). Every
// number is a lower bound of the truth at ComputedAt: a blob whose check
// was uncertain (a reverse link that is not a link file, an unknown size,
// a link database not known complete) counts in neither ReclaimableBytes
// nor ExclusiveBytes, only in UncertainBlobs.
type Usage struct {
	Repository string `json:"repository"`
	// ReclaimableBytes is what a collect of the repository would free now:
	// the data of the blobs its plan deletes, none of which another
	// repository links. 0 while a blocker stops a real run.
	ReclaimableBytes int64 `json:"reclaimable_bytes"`
	ReclaimableBlobs int   `json:"reclaimable_blobs"`
	// ExclusiveBytes is the data of the blobs only this repository links
	// (their reverse links name no other repository).
	ExclusiveBytes int64 `json:"exclusive_bytes"`
	ExclusiveBlobs int   `json:"exclusive_blobs"`
	// Blobs is how many distinct blobs the repository links (manifest
	// revisions and layer links); SharedBlobs of them another repository
	// links too.
	Blobs          int `json:"blobs"`
	SharedBlobs    int `json:"shared_blobs"`
	UncertainBlobs int `json:"uncertain_blobs"`
	// Manifests and ManifestsDeletable count the repository's manifest
	// revisions and those its plan deletes.
	Manifests          int `json:"manifests"`
	ManifestsDeletable int `json:"manifests_deletable"`
	// Capped: the plan reached the deletion cap, so a collect frees at
	// most ReclaimableBytes now and more after it.
	Capped bool `json:"capped"`
	// ComputedAt is when the estimate was made; RunID the dry run (or the
	// collect) it was made from, empty for the reclaimer's refreshes
	// (not kept as runs).
	ComputedAt time.Time `json:"computed_at"`
	RunID      string    `json:"run_id,omitempty"`
	// LinkDBComplete is the link database's state the estimate relied on:
	// false means no blob counted as exclusive or reclaimable.
	LinkDBComplete bool `json:"linkdb_complete"`
	// Blockers are the reasons a real run would not delete now (Redis
	// recording for less than the window, say).
	Blockers []AbortReason `json:"blockers"`
}

// UsageClaim is one repository a reclaimer claimed from the usage store's
// due set, held until its lease runs out.
type UsageClaim struct {
	Repo string
	// Lease is the store's token for the claim: marking the claim done
	// compares against it, so a repository marked due again meanwhile
	// stays due.
	Lease int64
}
