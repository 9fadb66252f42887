package linkdb

import (
	"context"
	"fmt"
	"sync"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// A missing reverse link is the one finding that lets GC delete a blob a
// repository still uses, so verify does not leave it at a report: whatever
// finds one repairs it, or makes sure no blob delete can act on it.
//
//   - With Repair, verify writes it (ReverseLinks.Ensure, the rule rebuild
//     follows: an extra reverse link only makes GC keep more; one whose
//     forward link is deleted meanwhile is a stale link, a leak that
//     rebuild removes). When the repositories phase then found nothing
//     else wrong, every forward link has its reverse link, which is what
//     a rebuild's repositories phase establishes, so verify marks the
//     database complete since its start, exactly as rebuild does.
//   - Without Repair, or when the write fails, verify removes the
//     completeness marker at once, before it walks on: GC and the
//     reclaimer then delete no blob until the database is whole again
//     (`linkdb verify --repair`, or `linkdb rebuild`).
//
// Either way only a missing link confirmed twice counts: the forward link
// is looked at again after its reverse link was found missing, because
// the middleware deletes a forward link before its reverse link, and a
// verify that read the forward link just before such a delete would
// otherwise find its reverse link "missing".

// markerState is what verify did about the completeness marker.
type markerState struct {
	mu      sync.Mutex
	present bool // found at the start
	removed bool
	written bool
}

// missingReverse handles forward link l, whose reverse link was not found.
func (v *verifier) missingReverse(ctx context.Context, l forwardLink) {
	if _, err := v.d.Stat(ctx, l.Path); layout.IsNotFound(err) {
		return // unlinked while we looked: its reverse link went after it
	}
	detail := ""
	if v.opts.Repair {
		st, err := v.links.Ensure(ctx, l.Blob, reclaim.RepoLink{Repo: l.Repo, Kind: l.Kind})
		if err == nil {
			if st != LinkPresent { // a push may have written it meanwhile
				v.repaired.Add(1)
			}
			return
		}
		detail = "repair failed: " + err.Error()
	}
	v.keep(l.Blob)
	v.f.add(Problem{Kind: MissingReverse, Path: l.Path, Repo: l.Repo, Digest: l.Blob, Detail: detail})
	v.unmark(ctx)
}

// unmark removes the completeness marker, once, if verify found it.
func (v *verifier) unmark(ctx context.Context) {
	m := &v.marker
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.present || m.removed {
		return
	}
	if err := MarkLinkDBIncomplete(ctx, v.d); err != nil {
		v.f.add(Problem{Kind: Unreadable, Path: markerPath, Detail: fmt.Sprintf("could not remove the marker after a missing reverse link: %v", err)})
		return
	}
	m.removed = true
}

// phaseOneClean says whether the repositories phase left every forward
// link with a well-formed reverse link and found nothing a rebuild would
// refuse to mark complete over (a broken_forward link is not such a thing:
// its reverse link is there; rebuild marks complete over it too).
func (v *verifier) phaseOneClean() bool {
	if v.repoUnreadable.Load() {
		return false
	}
	for _, k := range []Kind{MissingReverse, MissingReferrer, Corrupt, Unreadable} {
		if v.f.count(k) > 0 {
			return false
		}
	}
	return true
}

// markIfRepaired writes the marker, since rep.Started, after a --repair
// whose repositories phase was clean, when there is none: the middleware
// covers every link written since the walk began, and the walk covered
// every one before it (docs/operations.md, "Why a rebuild while serving
// leaves nothing uncovered"). A marker that could not be read is never
// overwritten (it is an unreadable finding, so the phase is not clean).
func (v *verifier) markIfRepaired(ctx context.Context, rep *Report) {
	m := &v.marker
	m.mu.Lock()
	defer m.mu.Unlock()
	if !v.opts.Repair || m.present || !v.phaseOneClean() {
		return
	}
	if err := MarkLinkDBComplete(ctx, v.d, rep.Started); err != nil {
		v.f.add(Problem{Kind: Unreadable, Path: markerPath, Detail: err.Error()})
		return
	}
	m.written = true
	since := rep.Started
	rep.CompleteSince = &since
}
