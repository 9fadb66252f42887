package gc

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"golang.org/x/sync/errgroup"
)

// facts is what a run reads besides the snapshot before it decides: pins,
// access records, reverse links and blob sizes. A failed read is a fact
// too (its error), and decide keeps the object it is about.
type facts struct {
	pins   map[digest.Digest]result[bool]
	access map[reclaim.Object]result[time.Time] // zero time: no record
	links  map[digest.Digest]result[[]reclaim.RepoLink]
	sizes  map[digest.Digest]result[int64] // of the blob's data; err may be "not found"
	// repairs are the repository's forward links found without their
	// reverse link (repair.go); unmarked is set when one could not be
	// written back and the link database was marked incomplete.
	repairs  []LinkRepair
	unmarked bool
}

type result[T any] struct {
	v   T
	err error
}

func newFacts() *facts {
	return &facts{pins: map[digest.Digest]result[bool]{}, access: map[reclaim.Object]result[time.Time]{},
		links: map[digest.Digest]result[[]reclaim.RepoLink]{}, sizes: map[digest.Digest]result[int64]{}}
}

// errNoFact: decide needed a fact nobody read. It keeps the object, like
// any failed read; wanted and gatherer.blob must make it impossible.
var errNoFact = errors.New("fact not gathered")

func lookup[K comparable, T any](m map[K]result[T], k K) (T, error) {
	r, ok := m[k]
	if !ok {
		var zero T
		return zero, errNoFact
	}
	return r.v, r.err
}

func (f *facts) pinned(d digest.Digest) (bool, error)                     { return lookup(f.pins, d) }
func (f *facts) lastAccess(o reclaim.Object) (time.Time, error)           { return lookup(f.access, o) }
func (f *facts) reverseLinks(d digest.Digest) ([]reclaim.RepoLink, error) { return lookup(f.links, d) }
func (f *facts) size(d digest.Digest) (int64, error)                      { return lookup(f.sizes, d) }

// wanted lists the objects whose facts decide may read, from the snapshot
// and the policy alone: every manifest the roots do not keep (pins and
// access), every layer link they do not reference (access), and the blobs
// of both (reverse links, access, size). That is more than decide reads
// when an untagged manifest turns out kept, never less.
func wanted(s *snapshot, pol policy) (manifests, layers, blobs []digest.Digest) {
	roots := markRoots(s)
	if !pol.keepUntag {
		manifests = roots.unkept()
	}
	if refd, unknown := roots.referenced(); !unknown {
		for _, d := range sortedDigests(s.layers) {
			if !refd[d] {
				layers = append(layers, d)
			}
		}
	}
	if pol.linkdbOK {
		blobs = unionSorted(manifests, layers)
	}
	return manifests, layers, blobs
}

// gatherer reads facts concurrently, readConcurrency at a time.
type gatherer struct {
	c   *Collector
	pol policy
	s   *snapshot // nil outside a run's plan: no repair
	f   *facts
	mu  sync.Mutex
	g   errgroup.Group
}

// gather reads every fact wanted lists. It never fails: each read's error
// is recorded with it.
func (c *Collector) gather(ctx context.Context, s *snapshot, pol policy) *facts {
	gt := &gatherer{c: c, pol: pol, s: s, f: newFacts()}
	gt.g.SetLimit(readConcurrency)
	manifests, layers, blobs := wanted(s, pol)
	for _, d := range manifests {
		if pol.pins {
			gt.run(func() { gt.pin(ctx, d) })
		}
		gt.run(func() { gt.access(ctx, reclaim.Object{Blob: d, Repo: pol.repo, Kind: reclaim.LinkManifest}) })
	}
	for _, d := range layers {
		gt.run(func() { gt.access(ctx, reclaim.Object{Blob: d, Repo: pol.repo, Kind: reclaim.LinkLayer}) })
	}
	for _, d := range blobs {
		gt.run(func() { gt.blob(ctx, d) })
	}
	_ = gt.g.Wait() // no task returns an error
	return gt.f
}

// gatherBlob reads the facts of one blob, for a delete outside a plan.
func (c *Collector) gatherBlob(ctx context.Context, pol policy, d digest.Digest) *facts {
	gt := &gatherer{c: c, pol: pol, f: newFacts()}
	gt.blob(ctx, d)
	return gt.f
}

func (gt *gatherer) run(task func()) { gt.g.Go(func() error { task(); return nil }) }

func (gt *gatherer) pin(ctx context.Context, d digest.Digest) {
	pinned, err := gt.c.pinner.Pinned(ctx, gt.pol.repo, d)
	gt.mu.Lock()
	defer gt.mu.Unlock()
	gt.f.pins[d] = result[bool]{pinned, err}
}

func (gt *gatherer) access(ctx context.Context, o reclaim.Object) result[time.Time] {
	t, ok, err := gt.c.tracker.LastAccess(ctx, o)
	if err != nil || !ok {
		t = time.Time{}
	}
	gt.mu.Lock()
	defer gt.mu.Unlock()
	gt.f.access[o] = result[time.Time]{t, err}
	return gt.f.access[o]
}

// blob reads nothing while the link database is incomplete. Otherwise it
// reads a blob's reverse links, then its access record unless another
// repository links it, then its size unless the record or the plan keeps
// it: exactly the order in which decideBlob stops looking.
func (gt *gatherer) blob(ctx context.Context, d digest.Digest) {
	if !gt.pol.linkdbOK {
		return
	}
	links, err := linksFor(ctx, gt.c.links, d, gt.pol.repo)
	if err == nil && !linkedByOthers(links, gt.pol.repo) {
		// every link is listed: this repository's own are all there
		links, err = gt.repairOwn(ctx, d, links)
	}
	gt.mu.Lock()
	gt.f.links[d] = result[[]reclaim.RepoLink]{links, err}
	gt.mu.Unlock()
	if err != nil || linkedByOthers(links, gt.pol.repo) {
		return
	}
	a := gt.access(ctx, reclaim.Object{Blob: d})
	if a.err != nil || gt.pol.recent(a.v) || !gt.pol.inPlan(reclaim.KindBlob, d) {
		return
	}
	var size int64
	fi, err := gt.c.driver.Stat(ctx, layout.BlobDataPath(d))
	if err == nil {
		size = fi.Size()
	}
	gt.mu.Lock()
	defer gt.mu.Unlock()
	gt.f.sizes[d] = result[int64]{size, err}
}

func linkedByOthers(links []reclaim.RepoLink, repo string) bool {
	for _, l := range links {
		if l.Repo != repo {
			return true
		}
	}
	return false
}
