// Package gcrun holds the words of one GC run that every package speaks:
// its Status and Step, the Progress it writes ahead of its work, the State
// the tracker keeps of it, and the Handle (a repository lock carrying the
// run record) it works under. Like the words in package reclaim, it
// imports nothing of the project but them.
package gcrun

import (
	"context"
	"time"

	"github.com/reclaim-registry/reclaim/reclaim"
)

// Status is where a run stands. Like reclaim.Reason it is a closed set whose
// strings are the API: the JSON report, the run records in Redis and the
// metrics use them.
type Status string

// The states of a run.
const (
	StatusRunning Status = "running" // begun, not finished
	StatusDone    Status = "done"    // finished; its report is complete
	StatusAborted Status = "aborted" // a precondition failed; nothing was deleted
	StatusFailed  Status = "failed"  // stopped by an error (a lost lock); what it deleted before is reported
	// StatusInterrupted: its process died (killed, OOM, node lost) while
	// it ran; Interruption says where. Found by the next reader of its
	// record (docs/gc-protocol.md, "Interrupted runs").
	StatusInterrupted Status = "interrupted"
)

// Statuses lists every status, in the order a run may pass them.
func Statuses() []Status {
	return []Status{StatusRunning, StatusDone, StatusAborted, StatusFailed, StatusInterrupted}
}

// Step is the part of a run in progress. A run writes each step ahead
// of it, and the object of each delete ahead of the delete.
type Step string

// The steps of a run, in order. Nothing is changed before StepManifests.
const (
	StepSnapshot   Step = "snapshot"    // preconditions and the snapshot of the repository
	StepPlan       Step = "plan"        // gathering facts and deciding
	StepManifests  Step = "manifests"   // deleting manifest revisions
	StepLayerLinks Step = "layer_links" // deleting layer links
	StepBlobs      Step = "blobs"       // deleting blobs whose links the run removed
)

// Progress is what a GC run writes ahead of its work, so that a run whose
// process dies leaves behind where it was (docs/gc-protocol.md, "Interrupted
// runs").
type Progress struct {
	// Step the run is in.
	Step Step
	// Kind and Object name the object the run is about to delete (empty
	// for a step change alone).
	Kind   reclaim.ObjectKind
	Object string
	// Deleting is set when a storage delete follows this write.
	Deleting bool
	// Unlinks is the blob whose link (layer link or manifest revision)
	// the delete removes ("" for none).
	Unlinks string
}

// State is what the tracker keeps of one GC run, readable by every
// instance.
type State struct {
	ID, Repo  string
	Status    Status
	StartedAt time.Time
	Step      Step
	// LastKind and LastObject are the last object the run wrote ahead of
	// a delete.
	LastKind   reclaim.ObjectKind
	LastObject string
	// DeletionsStarted: nil when unknown (unknown is not "no").
	DeletionsStarted *bool
	// Unlinked are the blobs whose links the run removed or was about to.
	Unlinked []string
	// Report is the run's final report (JSON), once it ended.
	Report []byte
	// InterruptedAt and MarkedBy: when, and by which reader, the run was
	// found dead and marked interrupted.
	InterruptedAt time.Time
	MarkedBy      string
	// ReconciledBy is the run that reconciled this interrupted one.
	ReconciledBy string
}

// Handle is a repository lock that carries a run record (redisstate's
// run lock is one).
type Handle interface {
	// Held is cancelled as soon as the lock is known lost (expired, taken
	// away, not renewable); the run works under it.
	Held() context.Context
	// Progress writes p ahead of the work it announces; on error that
	// work must not be done.
	Progress(ctx context.Context, p Progress) error
	// End stores the run's outcome and report (before Unlock).
	End(ctx context.Context, status Status, report []byte) error
	Unlock()
}
