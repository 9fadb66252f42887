package collector

import (
	"context"
	"sync"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/gc"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"golang.org/x/sync/errgroup"
)

// gathered is what a run read before it decides: the facts, and the
// repository's forward links it found without their reverse link
// (repair.go); unmarked is set when one could not be written back and the
// link database was marked incomplete.
type gathered struct {
	*gc.Facts
	repairs  []LinkRepair
	unmarked bool
}

// gatherer reads facts concurrently, readConcurrency at a time.
type gatherer struct {
	c   *Collector
	pol policy
	s   *gc.Snapshot // nil outside a run's plan: no repair
	f   *gathered
	mu  sync.Mutex
	g   errgroup.Group
}

// gather reads every fact gc.Wanted lists. It never fails: each read's
// error is recorded with it.
func (c *Collector) gather(ctx context.Context, s *gc.Snapshot, pol policy) *gathered {
	gt := &gatherer{c: c, pol: pol, s: s, f: &gathered{Facts: gc.NewFacts()}}
	gt.g.SetLimit(readConcurrency)
	manifests, layers, blobs := gc.Wanted(s, pol.Policy)
	for _, d := range manifests {
		if pol.Pins {
			gt.run(func() { gt.pin(ctx, d) })
		}
		gt.run(func() { gt.access(ctx, reclaim.Object{Blob: d, Repo: pol.Repo, Kind: reclaim.LinkManifest}) })
	}
	for _, d := range layers {
		gt.run(func() { gt.access(ctx, reclaim.Object{Blob: d, Repo: pol.Repo, Kind: reclaim.LinkLayer}) })
	}
	for _, d := range blobs {
		gt.run(func() { gt.blob(ctx, d) })
	}
	_ = gt.g.Wait() // no task returns an error
	return gt.f
}

// gatherBlob reads the facts of one blob, for a delete outside a plan.
func (c *Collector) gatherBlob(ctx context.Context, pol policy, d digest.Digest) *gc.Facts {
	gt := &gatherer{c: c, pol: pol, f: &gathered{Facts: gc.NewFacts()}}
	gt.blob(ctx, d)
	return gt.f.Facts
}

func (gt *gatherer) run(task func()) { gt.g.Go(func() error { task(); return nil }) }

func (gt *gatherer) pin(ctx context.Context, d digest.Digest) {
	pinned, err := gt.c.pinner.Pinned(ctx, gt.pol.Repo, d)
	gt.mu.Lock()
	defer gt.mu.Unlock()
	gt.f.Pins[d] = gc.Fact[bool]{V: pinned, Err: err}
}

func (gt *gatherer) access(ctx context.Context, o reclaim.Object) gc.Fact[time.Time] {
	t, ok, err := gt.c.tracker.LastAccess(ctx, o)
	if err != nil || !ok {
		t = time.Time{}
	}
	gt.mu.Lock()
	defer gt.mu.Unlock()
	gt.f.Access[o] = gc.Fact[time.Time]{V: t, Err: err}
	return gt.f.Access[o]
}

// blob reads nothing while the link database is incomplete. Otherwise it
// reads a blob's reverse links, then its access record unless another
// repository links it, then its size unless the record or the plan keeps
// it: exactly the order in which gc.Decide stops looking at a blob.
func (gt *gatherer) blob(ctx context.Context, d digest.Digest) {
	if !gt.pol.LinkDBComplete {
		return
	}
	links, err := linksFor(ctx, gt.c.links, d, gt.pol.Repo)
	if err == nil && !linkedByOthers(links, gt.pol.Repo) {
		// every link is listed: this repository's own are all there
		links, err = gt.repairOwn(ctx, d, links)
	}
	gt.mu.Lock()
	gt.f.Links[d] = gc.Fact[[]reclaim.RepoLink]{V: links, Err: err}
	gt.mu.Unlock()
	if err != nil || linkedByOthers(links, gt.pol.Repo) {
		return
	}
	a := gt.access(ctx, reclaim.Object{Blob: d})
	if a.Err != nil || gt.pol.Recent(a.V) || !gt.pol.InPlan(reclaim.KindBlob, d) {
		return
	}
	var size int64
	fi, err := gt.c.driver.Stat(ctx, layout.BlobDataPath(d))
	switch {
	case err == nil:
		size = fi.Size()
	case layout.IsNotFound(err):
		// the data is gone already: size 0, no error (gc.Facts.Sizes)
		err = nil
	}
	gt.mu.Lock()
	defer gt.mu.Unlock()
	gt.f.Sizes[d] = gc.Fact[int64]{V: size, Err: err}
}

// linkedByOthers: another repository links the blob (a trash hold is not
// one: the blob's size is still read, for the bytes the trash holds).
func linkedByOthers(links []reclaim.RepoLink, repo string) bool {
	for _, l := range links {
		if l.Kind != reclaim.LinkTrash && l.Repo != repo {
			return true
		}
	}
	return false
}
