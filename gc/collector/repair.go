package collector

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/gc"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// A run reads its own repository's forward links (the snapshot) and, for
// the blobs it considers, every reverse link (when no other repository
// links the blob, the listing is complete). A forward link of the
// repository whose reverse link is not in that listing is a hole in the
// link database: a collect of another repository could delete the blob
// this one still links. Reverse links are the source of truth by design,
// so the run does not trust the hole; it fills it:
//
//   - the forward link is looked at again (a client's delete removes the
//     forward link before the reverse link, so a link deleted since the
//     snapshot is not a hole);
//   - a real run writes the reverse link (Config.Repair, the write the
//     middleware and rebuild make); a dry run reports that it would, and
//     decides as if it had, so both decide the same;
//   - a write that fails keeps the blob (check_failed) and removes the
//     completeness marker (Config.MarkLinkDBIncomplete): no blob is
//     deleted on the strength of the database, by this run or any other,
//     until `linkdb verify --repair` or `linkdb rebuild` made it whole.
//
// Every hole found is in the report (reverse_links_repaired) and counted
// by the registry's metrics.

// The outcomes of a LinkRepair.
const (
	RepairWritten    = "written"     // the reverse link was written back
	RepairWouldWrite = "would_write" // a dry run: a real run writes it
	RepairFailed     = "failed"      // not written; the link database was marked incomplete
	RepairReported   = "reported"    // no LinkRepairer configured: reported only
)

// LinkRepair is a forward link of the run's repository that was found
// without its reverse link.
type LinkRepair struct {
	Digest  digest.Digest    `json:"digest"`
	Link    reclaim.LinkKind `json:"link"`
	Outcome string           `json:"outcome"`
	Detail  string           `json:"detail,omitempty"`
}

// errHole: a reverse link is missing and could not be written back.
var errHole = errors.New("this repository's reverse link is missing and could not be written back")

// repairOwn checks that every forward link the snapshot holds from the
// repository to d has its reverse link in links (a complete listing), and
// fills the holes. It returns the links with those it filled, or an error
// that keeps the blob.
func (gt *gatherer) repairOwn(ctx context.Context, d digest.Digest, links []reclaim.RepoLink) ([]reclaim.RepoLink, error) {
	if gt.s == nil {
		return links, nil
	}
	repo := gt.pol.Repo
	var kinds []reclaim.LinkKind
	if gt.s.Layers[d] {
		kinds = append(kinds, reclaim.LinkLayer)
	}
	if _, ok := gt.s.Revisions[d]; ok {
		kinds = append(kinds, reclaim.LinkManifest)
	}
	var holeErr error
	for _, k := range kinds {
		l := reclaim.RepoLink{Repo: repo, Kind: k}
		if hasLink(links, l) {
			continue
		}
		if _, err := gt.c.driver.Stat(ctx, layout.ForwardLinkPath(repo, d, k)); layout.IsNotFound(err) {
			continue // deleted since the snapshot, reverse link after it
		}
		rp := LinkRepair{Digest: d, Link: k}
		switch {
		case gt.pol.dryRun:
			rp.Outcome = RepairWouldWrite
		case gt.c.cfg.Repair == nil:
			rp.Outcome = RepairReported
		default:
			if err := gt.c.cfg.Repair.Put(ctx, d, l); err != nil {
				rp.Outcome, rp.Detail = RepairFailed, err.Error()
				holeErr = fmt.Errorf("%s link: %w: %v", k, errHole, err)
			} else {
				rp.Outcome = RepairWritten
			}
		}
		if rp.Outcome != RepairFailed {
			// written (or, in a dry run, would be): it keeps the blob
			// wherever the run keeps the forward link
			links = append(links, l)
		}
		gt.mu.Lock()
		gt.f.repairs = append(gt.f.repairs, rp)
		gt.mu.Unlock()
	}
	if holeErr != nil {
		gt.unmark(ctx)
		return nil, holeErr
	}
	sort.Slice(links, func(i, j int) bool {
		if links[i].Repo != links[j].Repo {
			return links[i].Repo < links[j].Repo
		}
		return links[i].Kind < links[j].Kind
	})
	return links, nil
}

// unmark removes the completeness marker, once per run.
func (gt *gatherer) unmark(ctx context.Context) {
	gt.mu.Lock()
	defer gt.mu.Unlock()
	if gt.f.unmarked {
		return
	}
	gt.f.unmarked = true
	if m := gt.c.cfg.MarkLinkDBIncomplete; m != nil {
		if err := m(ctx); err != nil {
			gt.f.repairs = append(gt.f.repairs, LinkRepair{Outcome: RepairFailed, Detail: "mark the link database incomplete: " + err.Error()})
		}
	}
}

func hasLink(links []reclaim.RepoLink, l reclaim.RepoLink) bool {
	for _, x := range links {
		if x.Repo == l.Repo && x.Kind == l.Kind {
			return true
		}
	}
	return false
}

// repaired files the holes f found into the report. One that could not be
// filled also makes the rest of the run delete no blob, as an incomplete
// link database does.
func (r *run) repaired(f *gathered) {
	sort.Slice(f.repairs, func(i, j int) bool {
		a, b := f.repairs[i], f.repairs[j]
		if a.Digest != b.Digest {
			return a.Digest < b.Digest
		}
		return a.Link < b.Link
	})
	r.rep.ReverseLinksRepaired = append(r.rep.ReverseLinksRepaired, f.repairs...)
	for _, rp := range f.repairs {
		if rp.Outcome == RepairFailed {
			r.rep.Errors = append(r.rep.Errors, gc.Decision{Kind: reclaim.KindBlob, Digest: rp.Digest, Reason: reclaim.ReasonCheckFailed,
				Detail: fmt.Sprintf("reverse link of %s %s missing, writing it failed: %s", r.pol.Repo, rp.Link, rp.Detail)})
		}
	}
	if f.unmarked && r.pol.LinkDBComplete {
		r.pol.LinkDBComplete = false
		r.pol.LinkDBNote = "a reverse link of this repository was missing and could not be written back; the link database is marked incomplete: run `registry linkdb verify --repair`"
		r.rep.Blockers = append(r.rep.Blockers, Blocker{Reason: reclaim.AbortLinkDBIncomplete, Blocks: BlocksBlobs, Detail: r.pol.LinkDBNote})
	}
}
