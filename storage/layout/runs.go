package layout

import "time"

// The run states the tracker stores (gc.RunStatus spells the same strings).
const (
	RunRunning     = "running"
	RunInterrupted = "interrupted"
)

// RunProgress is what a GC run writes ahead of its work, so that a run whose
// process dies leaves behind where it was (docs/gc-protocol.md, "Interrupted
// runs").
type RunProgress struct {
	// Step the run is in: snapshot, plan, manifests, layer_links, blobs.
	Step string
	// Kind and Object name the object the run is about to delete ("" for
	// a step change alone).
	Kind, Object string
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
	Status    string
	StartedAt time.Time
	Step      string
	// LastKind and LastObject are the last object the run wrote ahead of
	// a delete.
	LastKind, LastObject string
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
