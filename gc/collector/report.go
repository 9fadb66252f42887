package collector

import (
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/gc"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/reclaim/gcrun"
)

// Interruption is where an interrupted run died.
type Interruption struct {
	// Step it was in.
	Step gcrun.Step `json:"step"`
	// LastObject is the last object it wrote ahead of a delete (null: it
	// deleted nothing, or its record does not say). The delete of that
	// object may have been sent, done, or cut short.
	LastObject *ObjectRef `json:"last_object"`
	// DeletionsStarted: whether any storage delete had been sent; null
	// when unknown (Redis may have lost the record's last writes).
	DeletionsStarted *bool `json:"deletions_started"`
	// DetectedAt is when a reader found it dead, and DetectedBy which
	// reader ("instance <id>" for a GET, "run <id>" for a run).
	DetectedAt time.Time `json:"detected_at,omitzero"`
	DetectedBy string    `json:"detected_by,omitempty"`
	// ReconciledBy is the run that reconciled it (empty: not yet).
	ReconciledBy string `json:"reconciled_by,omitempty"`
}

// Reconciliation is what a run did, before its own work, about an
// interrupted run of the same repository.
type Reconciliation struct {
	RunID            string     `json:"run_id"`
	Step             gcrun.Step `json:"step"`
	LastObject       *ObjectRef `json:"last_object"`
	DeletionsStarted *bool      `json:"deletions_started"`
	// Rechecked are the objects the interrupted run may have half done,
	// each with what was found.
	Rechecked []Recheck `json:"rechecked"`
	// OrphansQueued are blobs found with data and no reverse link left,
	// queued for the reclaimer's review.
	OrphansQueued []digest.Digest `json:"orphans_queued"`
}

// ObjectRef names one object.
type ObjectRef struct {
	Kind   reclaim.ObjectKind `json:"kind"`
	Digest digest.Digest      `json:"digest"`
}

// Recheck is one object a reconciliation looked at again.
type Recheck struct {
	ObjectRef
	Finding string `json:"finding"`
}

// Timings of one run's phases, in milliseconds.
type Timings struct {
	SnapshotMS int64 `json:"snapshot_ms"`
	PlanMS     int64 `json:"plan_ms"`
	SweepMS    int64 `json:"sweep_ms"` // the delete phase (the JSON name predates the word)
	TotalMS    int64 `json:"total_ms"`
}

// Report is the result of one run. In a dry run the *_deleted lists and
// bytes_freed say what a real run would delete now.
type Report struct {
	RunID      string       `json:"run_id"`
	Repository string       `json:"repository"`
	DryRun     bool         `json:"dry_run"`
	PlanID     string       `json:"plan_id,omitempty"`
	Status     gcrun.Status `json:"status"`
	Abort      string       `json:"abort_reason,omitempty"`
	StartedAt  time.Time    `json:"started_at"`
	FinishedAt time.Time    `json:"finished_at,omitzero"`
	WindowSecs int64        `json:"window_seconds"`
	// Blockers are the preconditions of a real run that did not hold. A
	// dry run lists them and plans anyway: its deleted lists are what a
	// real run would delete once the run-wide blockers clear.
	Blockers []Blocker `json:"blockers"`

	ManifestsDeleted []digest.Digest `json:"manifests_deleted"`
	LayersUnlinked   []digest.Digest `json:"layers_unlinked"`
	BlobsDeleted     []digest.Digest `json:"blobs_deleted"`
	BytesFreed       int64           `json:"bytes_freed"`
	// BlobsInTrash are the blobs whose last link the run removed and whose
	// data the trash holds (trash.keep > 0): gone from /v2/ like the
	// deleted ones, their BytesInTrash freed only when the entries expire
	// and are purged; restorable until RestorableUntil at least.
	BlobsInTrash    []digest.Digest `json:"blobs_in_trash,omitempty"`
	BytesInTrash    int64           `json:"bytes_in_trash,omitempty"`
	RestorableUntil *time.Time      `json:"restorable_until,omitempty"`

	// Kept lists every object kept, with its reason.
	Kept []gc.Decision `json:"kept"`
	// Changed lists objects a plan listed for deletion that no longer
	// qualified when it was applied, with the reason they were kept.
	Changed []gc.Decision `json:"changed,omitempty"`
	// Errors lists deletes and checks that failed; the run went on.
	Errors []gc.Decision `json:"errors"`
	// ReverseLinksRepaired lists the repository's forward links the run
	// found without their reverse link, and what it did (gc/collector/repair.go).
	ReverseLinksRepaired []LinkRepair `json:"reverse_links_repaired,omitempty"`

	Timings Timings `json:"timings"`

	// Step is the step a running run is in (empty once it ended).
	Step gcrun.Step `json:"step,omitempty"`
	// Interruption is set on an interrupted run.
	Interruption *Interruption `json:"interruption,omitempty"`
	// Reconciled lists the interrupted runs of the repository this run
	// reconciled before its own work.
	Reconciled []Reconciliation `json:"reconciled,omitempty"`

	decisions []gc.Decision
}

// Decisions returns every decision of the run, one per object looked at.
func (r *Report) Decisions() []gc.Decision { return r.decisions }

// add records the decision and files it into the report's lists.
func (r *Report) add(d gc.Decision) {
	r.decisions = append(r.decisions, d)
	if d.Kind == reclaim.KindBlob && d.Reason == reclaim.ReasonInTrash {
		r.BlobsInTrash = append(r.BlobsInTrash, d.Digest)
		r.BytesInTrash += d.Size
		return
	}
	if !d.Deleted() {
		r.Kept = append(r.Kept, d)
		if d.Reason == reclaim.ReasonDeleteFailed || d.Reason == reclaim.ReasonCheckFailed {
			r.Errors = append(r.Errors, d)
		}
		return
	}
	switch d.Kind {
	case reclaim.KindManifest:
		r.ManifestsDeleted = append(r.ManifestsDeleted, d.Digest)
	case reclaim.KindLayerLink:
		r.LayersUnlinked = append(r.LayersUnlinked, d.Digest)
	case reclaim.KindBlob:
		r.BlobsDeleted = append(r.BlobsDeleted, d.Digest)
		r.BytesFreed += d.Size
	}
}

func newReport(runID, repo string, dryRun bool, window time.Duration, now time.Time) *Report {
	return &Report{
		RunID:            runID,
		Repository:       repo,
		DryRun:           dryRun,
		Status:           gcrun.StatusRunning,
		StartedAt:        now,
		WindowSecs:       int64(window / time.Second),
		ManifestsDeleted: []digest.Digest{},
		LayersUnlinked:   []digest.Digest{},
		BlobsDeleted:     []digest.Digest{},
		Blockers:         []Blocker{},
		Kept:             []gc.Decision{},
		Errors:           []gc.Decision{},
	}
}
