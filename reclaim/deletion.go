package reclaim

import (
	"context"

	"github.com/opencontainers/go-digest"
)

// Deletion is one object a run removed from storage, as the deletion
// events (registry/deletionevents) tell it.
type Deletion struct {
	Kind       ObjectKind // KindManifest, KindLayerLink, KindBlob or KindTag
	Repository string     // empty for a blob the reclaimer deleted: no repository links it
	Digest     digest.Digest
	Tag        string // the deleted tag (retention)
	MediaType  string // a manifest's, when known
	Size       int64  // bytes, when known
	Reason     string // why it was deleted: a Reason's name, or "retention"
	// Trash is the trash entry that holds it (trash.keep > 0): gone from
	// /v2/, restorable by it until it expires; "" for a final delete.
	Trash string
}

// Deletions is what one run (a collect, a reclaimer tick, a retention
// apply, a purge of the trash through the API) removed, in the order it
// removed them.
type Deletions struct {
	Source   string // "gc", "reclaimer", "retention" or "trash"
	RunID    string // the GC run's id, the tick's
	PlanID   string // the plan applied, if any
	Instance string // the process that deleted
	Objects  []Deletion
}

// DeletionSink hears what a run deleted, once per run, after the deletes
// are durable. Deleted must not block on the network: it is called on the
// run's goroutine, after its last delete.
type DeletionSink interface {
	Deleted(ctx context.Context, d Deletions)
}
