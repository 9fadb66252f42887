package reclaim

import "time"

// RunStatus is where a run stands. Like Reason it is a closed set whose
// strings are the API: the JSON report, the run records in Redis and the
// metrics use them.
type RunStatus string

// The states of a run.
const (
	StatusRunning RunStatus = "running" // begun, not finished
	StatusDone    RunStatus = "done"    // finished; its report is complete
	StatusAborted RunStatus = "aborted" // a precondition failed; nothing was deleted
	StatusFailed  RunStatus = "failed"  // stopped by an error (a lost lock); what it deleted before is reported
	// StatusInterrupted: its process died (killed, OOM, node lost) while
	// it ran; Interruption says where. Found by the next reader of its
	// record (docs/gc-protocol.md, "Interrupted runs").
	StatusInterrupted RunStatus = "interrupted"
)

// RunStatuses lists every status, in the order a run may pass them.
func RunStatuses() []RunStatus {
	return []RunStatus{StatusRunning, StatusDone, StatusAborted, StatusFailed, StatusInterrupted}
}

// RunStep is the part of a run in progress. A run writes each step ahead
// of it, and the object of each delete ahead of the delete.
type RunStep string

// The steps of a run, in order. Nothing is changed before StepManifests.
const (
	StepSnapshot   RunStep = "snapshot"    // preconditions and the snapshot of the repository
	StepPlan       RunStep = "plan"        // gathering facts and deciding
	StepManifests  RunStep = "manifests"   // deleting manifest revisions
	StepLayerLinks RunStep = "layer_links" // deleting layer links
	StepBlobs      RunStep = "blobs"       // deleting blobs whose links the run removed
)

// RunProgress is what a GC run writes ahead of its work, so that a run whose
// process dies leaves behind where it was (docs/gc-protocol.md, "Interrupted
// runs").
type RunProgress struct {
	// Step the run is in.
	Step RunStep
	// Kind and Object name the object the run is about to delete (empty
	// for a step change alone).
	Kind   ObjectKind
	Object string
	// Deleting is set when a storage delete follows this write.
	Deleting bool
	// Unlinks is the blob whose link (layer link or manifest revision)
	// the delete removes ("" for none).
	Unlinks string
}

// RunState is what the tracker keeps of one GC run, readable by every
// instance.
type RunState struct {
	ID, Repo  string
	Status    RunStatus
	StartedAt time.Time
	Step      RunStep
	// LastKind and LastObject are the last object the run wrote ahead of
	// a delete.
	LastKind   ObjectKind
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
