package gc

import (
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/reclaim"
)

// Policy is everything a run decides by besides the snapshot and the
// facts: the request, the configuration and what the preconditions found.
type Policy struct {
	Repo         string // "" for the reclaimer: every link is another repository's
	Now          time.Time
	Window       time.Duration
	Cap          int // link deletions per run; 0 means no cap
	KeepUntagged bool
	Pins         bool // a pin store is configured: consult the pin facts
	// Only, when set, is the plan being applied: an object it does not
	// list is kept (not_in_plan).
	Only func(reclaim.ObjectKind, digest.Digest) bool
	// LinkDBComplete: the reverse-link database is known to be complete,
	// so an empty reverse-link list means "linked nowhere". LinkDBNote says
	// why not.
	LinkDBComplete bool
	LinkDBNote     string
	// Trash: removed objects go to the trash (trash.keep > 0), so a blob
	// the plan frees is planned as held there (ReasonInTrash), not deleted.
	Trash bool
}

// Recent reports whether t is within the window.
func (p Policy) Recent(t time.Time) bool { return t.After(p.Now.Add(-p.Window)) }

// InPlan reports whether an applied plan (if any) lists the object.
func (p Policy) InPlan(k reclaim.ObjectKind, d digest.Digest) bool {
	return p.Only == nil || p.Only(k, d)
}

// Outcome is what Decide returns: a decision for every object, and what to
// delete in the order the delete phase deletes it.
type Outcome struct {
	Decisions []Decision      // every object, in report order
	Manifests []digest.Digest // to delete, parents before children
	Layers    []digest.Digest
	Blobs     []digest.Digest
}

type key struct {
	kind reclaim.ObjectKind
	d    digest.Digest
}
