package collector

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"

	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"golang.org/x/sync/errgroup"
)

// The reclaimable-bytes estimate of one repository is made from a dry run
// under the configured policy (the same snapshot, facts and decisions a
// collect makes, so there is no second decision logic) plus, for each blob
// the repository links that the plan did not already settle, its reverse
// links read with ListFor (which stops at the first other repository: a
// bounded check, never a full list) and its size. Every uncertainty
// counts against the estimate, never for it:
//
//	reverse links unreadable, or one is not a link file  -> uncertain
//	the link database not known complete                  -> uncertain (nothing is checked)
//	the blob's size unknown (stat failed, data missing)   -> uncertain
//	another repository links it                           -> shared (0 exclusive, 0 reclaimable)
//	a blocker stops a real run (Redis recording too short) -> 0 reclaimable
//
// so both numbers are lower bounds of what a walk of the whole storage
// would find at that moment (TestUsageAgainstBruteForce).

// UsageStore keeps each repository's Usage where every instance reads it,
// ranked (redisstate's UsageStore). Runs write to it; gc/reclaimer also
// walks it to choose what to refresh (its own UsageStore).
type UsageStore interface {
	// PutUsage stores u and ranks it; due marks the record stale at once
	// (a capped collect: more is reclaimable than it says).
	PutUsage(ctx context.Context, u reclaim.Usage, due bool) error
	// DeleteUsage drops repo's record and ranks (the repository is gone).
	DeleteUsage(ctx context.Context, repo string) error
}

// ErrNoUsageStore: the collector keeps no usage records.
var ErrNoUsageStore = errors.New("gc: no usage store configured")

// Usage estimates repo now (one dry run and its checks: one repository's
// cost), stores the estimate and returns it with the dry run's report,
// which Run and Runs list like any other.
func (c *Collector) Usage(ctx context.Context, repo string) (reclaim.Usage, *Report, error) {
	return c.estimate(ctx, repo, false)
}

// RefreshUsage estimates repo and stores the estimate as Usage does, but
// the dry run is kept out of the runs and the estimate names no run
// (gc/reclaimer refreshes a few every tick: nobody asked for them).
func (c *Collector) RefreshUsage(ctx context.Context, repo string) error {
	_, _, err := c.estimate(ctx, repo, true)
	return err
}

// estimate is Usage; an unlisted dry run (the reclaimer's) is kept out of
// the runs, and its estimate names no run.
func (c *Collector) estimate(ctx context.Context, repo string, unlisted bool) (reclaim.Usage, *Report, error) {
	if c.cfg.Usage == nil {
		return reclaim.Usage{}, nil, ErrNoUsageStore
	}
	var r *run
	var rep *Report
	walk := func() (err error) {
		if r, err = c.begin(ctx, repo, RunOptions{DryRun: true, unlisted: unlisted}); err != nil {
			return err
		}
		rep, err = r.finish(ctx)
		return err
	}
	var err error
	if unlisted { // the reclaimer's, one at a time
		err = walk()
	} else {
		err = c.bounded(ctx, repo, walk)
	}
	if r == nil {
		return reclaim.Usage{}, nil, err
	}
	if errors.Is(err, ErrRepositoryNotFound) {
		// gone: its record must not rank (nor be refreshed) for ever
		if derr := c.cfg.Usage.DeleteUsage(ctx, repo); derr != nil {
			return reclaim.Usage{}, rep, derr
		}
	}
	if err != nil {
		return reclaim.Usage{}, rep, err
	}
	return r.usage, rep, r.usageErr
}

// recordUsage writes the usage the run leaves behind, when the collector
// keeps usage records. A dry run under the configured policy is an
// estimate. A real run writes what is left after it: nothing reclaimable
// (it just freed what it could; never an overstatement), the exclusive
// bytes of what it kept, and marks the record due when more may be
// reclaimable than that (capped, errors, a plan or a policy of its own).
// A dry run with options of its own says nothing about the configured
// policy and writes nothing.
func (r *run) recordUsage(ctx context.Context) {
	st := r.c.cfg.Usage
	if st == nil || r.rep.DryRun && !r.configured {
		return
	}
	u := r.c.usageOf(ctx, r.pol, r.rep)
	if r.unlisted {
		u.RunID = ""
	}
	due := u.Capped || !r.rep.DryRun && (!r.configured || len(r.rep.Errors) > 0)
	r.usage, r.usageErr = u, st.PutUsage(ctx, u, due)
}

// blobClass is what a usage check found about one blob.
type blobClass int

const (
	uncertain blobClass = iota
	exclusive
	shared
)

type blobUsage struct {
	class blobClass
	size  int64
}

// usageOf computes the usage from a finished run's report: what the
// repository links (its manifests and layer links; after a real run,
// those it kept), the plan's blob decisions where they settle a blob, and
// a check of every other one.
func (c *Collector) usageOf(ctx context.Context, pol policy, rep *Report) reclaim.Usage {
	u := reclaim.Usage{Repository: rep.Repository, ComputedAt: rep.FinishedAt, RunID: rep.RunID,
		LinkDBComplete: pol.LinkDBComplete, Blockers: []reclaim.AbortReason{}}
	blocked := false
	for _, b := range rep.Blockers {
		u.Blockers = append(u.Blockers, b.Reason)
		blocked = blocked || b.Blocks == BlocksRun
	}
	known := map[digest.Digest]blobUsage{}
	sizes := map[digest.Digest]int64{} // manifests: the length of the content read
	linked := map[digest.Digest]bool{}
	for _, d := range rep.Decisions() {
		u.Capped = u.Capped || d.Reason == reclaim.ReasonCapped
		switch {
		case d.Kind == reclaim.KindBlob && d.Reason == reclaim.ReasonLinkedElsewhere:
			known[d.Digest] = blobUsage{class: shared}
		case d.Kind == reclaim.KindBlob && d.Reason == reclaim.ReasonUnreferenced && rep.DryRun:
			known[d.Digest] = blobUsage{class: exclusive, size: d.Size}
			if !blocked {
				u.ReclaimableBlobs++
				u.ReclaimableBytes += d.Size
			}
		case d.Kind == reclaim.KindBlob, d.Deleted() && !rep.DryRun:
			// another blob decision settles nothing (the check below
			// does); what a real run deleted is linked no more
		case d.Kind == reclaim.KindManifest:
			u.Manifests++
			if d.Deleted() {
				u.ManifestsDeletable++
			}
			linked[d.Digest], sizes[d.Digest] = true, d.Size
		case d.Kind == reclaim.KindLayerLink:
			linked[d.Digest] = true
		}
	}
	for _, b := range c.checkBlobs(ctx, pol, linked, known, sizes) {
		u.Blobs++
		switch b.class {
		case exclusive:
			u.ExclusiveBlobs++
			u.ExclusiveBytes += b.size
		case shared:
			u.SharedBlobs++
		default:
			u.UncertainBlobs++
		}
	}
	return u
}

// checkBlobs classifies every linked blob: as known says, or by a check,
// readConcurrency at a time.
func (c *Collector) checkBlobs(ctx context.Context, pol policy, linked map[digest.Digest]bool,
	known map[digest.Digest]blobUsage, sizes map[digest.Digest]int64) map[digest.Digest]blobUsage {
	out := make(map[digest.Digest]blobUsage, len(linked))
	var mu sync.Mutex
	set := func(d digest.Digest, b blobUsage) {
		mu.Lock()
		defer mu.Unlock()
		out[d] = b
	}
	var g errgroup.Group
	g.SetLimit(readConcurrency)
	for _, d := range slices.Sorted(maps.Keys(linked)) {
		b, ok := known[d]
		switch {
		case ok:
			set(d, b)
		case !pol.LinkDBComplete:
			set(d, blobUsage{class: uncertain})
		default:
			g.Go(func() error {
				set(d, c.checkBlob(ctx, pol.Repo, d, sizes[d]))
				return nil
			})
		}
	}
	_ = g.Wait() // no task returns an error
	return out
}

// checkBlob asks whether repo is the only repository that links d, and
// the size of d's data (size, when > 0, is already known).
func (c *Collector) checkBlob(ctx context.Context, repo string, d digest.Digest, size int64) blobUsage {
	links, err := linksFor(ctx, c.links, d, repo)
	if err != nil || len(links) == 0 {
		// none at all: the forward link was removed since the snapshot,
		// or the link database lacks one; either way, not known
		return blobUsage{class: uncertain}
	}
	for _, l := range links {
		if l.Problem != "" {
			return blobUsage{class: uncertain}
		}
	}
	if linkedByOthers(links, repo) {
		return blobUsage{class: shared}
	}
	if size <= 0 {
		fi, err := c.driver.Stat(ctx, layout.BlobDataPath(d))
		if err != nil {
			return blobUsage{class: uncertain}
		}
		size = fi.Size()
	}
	return blobUsage{class: exclusive, size: size}
}
