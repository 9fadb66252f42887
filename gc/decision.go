package gc

import (
	"encoding/json"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/reclaim"
)

// Decision is the one verdict a run reaches about one object.
type Decision struct {
	Kind   reclaim.ObjectKind `json:"kind"`
	Digest digest.Digest      `json:"digest"`
	Reason reclaim.Reason     `json:"reason"`
	// Size in bytes, for blobs (and manifests) when known.
	Size int64 `json:"size,omitempty"`
	// LastAccess recorded by the tracker, when there is one.
	LastAccess *time.Time `json:"last_access,omitempty"`
	// Detail adds context: the tag, the error text.
	Detail string `json:"detail,omitempty"`
	// Trash is the trash entry that holds what this decision removed
	// (trash.keep > 0): restorable by its id until the entry expires.
	Trash string `json:"trash_entry,omitempty"`
}

// Deleted reports whether the decision is a deletion (done, or in a dry run
// to be done).
func (d Decision) Deleted() bool { return d.Reason.Deletes() }

// MarshalJSON adds the reason's message next to its machine name.
func (d Decision) MarshalJSON() ([]byte, error) {
	type plain Decision
	return json.Marshal(struct {
		plain
		Message string `json:"message"`
	}{plain(d), d.Reason.Message()})
}
