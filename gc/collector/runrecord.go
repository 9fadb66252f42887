package collector

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/gc"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/reclaim/gcrun"
)

// Run records (docs/gc-protocol.md, "Interrupted runs"). With a tracker that
// is a RunRecorder, a real run takes its repository lock and its record in
// one step, writes each step ahead of it and the object of each delete ahead
// of the delete, and stores its outcome before it unlocks. A record still
// "running" whose lock is gone belongs to a run whose process died; the
// first reader marks it interrupted.

// runLog writes one run's record. A nil *runLog (dry runs, the reclaimer,
// a tracker without run records) writes nothing.
type runLog struct {
	h   gcrun.Handle
	r   *run
	err error // the first failed step write, reported once
}

// step writes s ahead of the step. Best effort: the deletes of the step
// write it again, and must succeed.
func (l *runLog) step(ctx context.Context, s gcrun.Step) {
	if l == nil {
		return
	}
	l.r.rep.Step = s
	l.r.c.store(l.r.rep)
	if err := l.h.Progress(ctx, gcrun.Progress{Step: s}); err != nil && l.err == nil {
		l.err = err
	}
}

// ahead writes the delete of d (of kind k) ahead of it; on error the delete
// must not happen.
func (l *runLog) ahead(ctx context.Context, k reclaim.ObjectKind, d digest.Digest) error {
	if l == nil {
		return nil
	}
	p := gcrun.Progress{Kind: k, Object: d.String(), Deleting: true}
	switch k {
	case reclaim.KindManifest:
		p.Step, p.Unlinks = gcrun.StepManifests, d.String()
	case reclaim.KindLayerLink:
		p.Step, p.Unlinks = gcrun.StepLayerLinks, d.String()
	default:
		p.Step = gcrun.StepBlobs
	}
	if err := l.h.Progress(ctx, p); err != nil {
		return fmt.Errorf("record the delete ahead: %w", err)
	}
	return nil
}

// end stores the run's outcome in its record.
func (l *runLog) end(ctx context.Context) {
	if l == nil {
		return
	}
	rep := l.r.rep
	rep.Step = ""
	b, err := json.Marshal(rep)
	if err == nil {
		err = l.h.End(context.WithoutCancel(ctx), rep.Status, b)
	}
	if err != nil {
		rep.Errors = append(rep.Errors, gc.Decision{Kind: reclaim.KindRun, Reason: reclaim.ReasonCheckFailed,
			Detail: fmt.Sprintf("store the run record: %v (other instances may read this run as interrupted)", err)})
	}
}

// LookupRun returns a run's report: from this process while it runs here,
// else from the run records every instance shares, where a run whose
// process died reads "interrupted" (and is marked so, by this reader, if it
// is the first to find it).
func (c *Collector) LookupRun(ctx context.Context, id string) (*Report, bool, error) {
	if rep, ok := c.Run(id); ok {
		return rep, true, nil
	}
	if c.recorder == nil {
		return nil, false, nil
	}
	st, ok, err := c.recorder.LoadRun(ctx, id, "instance "+c.instance)
	if err != nil || !ok {
		return nil, false, err
	}
	rep, err := reportOf(st)
	return rep, err == nil, err
}

// reportOf is the report a run record holds: its final report once it
// ended, else what the record says of it.
func reportOf(st gcrun.State) (*Report, error) {
	if len(st.Report) > 0 && st.Status != gcrun.StatusInterrupted {
		var rep Report
		if err := json.Unmarshal(st.Report, &rep); err != nil {
			return nil, fmt.Errorf("run %s: stored report: %w", st.ID, err)
		}
		return &rep, nil
	}
	rep := newReport(st.ID, st.Repo, false, 0, st.StartedAt)
	rep.WindowSecs = 0
	rep.Status = st.Status
	switch rep.Status {
	case gcrun.StatusRunning:
		rep.Step = st.Step
	case gcrun.StatusInterrupted:
		rep.Interruption = &Interruption{Step: st.Step, LastObject: lastObject(st),
			DeletionsStarted: st.DeletionsStarted, DetectedAt: st.InterruptedAt, DetectedBy: st.MarkedBy, ReconciledBy: st.ReconciledBy}
	}
	return rep, nil
}

func lastObject(st gcrun.State) *ObjectRef {
	if st.LastObject == "" {
		return nil
	}
	return &ObjectRef{Kind: st.LastKind, Digest: digest.Digest(st.LastObject)}
}
