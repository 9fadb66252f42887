package reclaimer

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sync"
	"sync/atomic"

	"github.com/opencontainers/go-digest"
	"golang.org/x/sync/errgroup"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// Each reclaimer tick also scrubs a few repositories
// (Config.ScrubRepos, default 2): it lists every forward link of
// each (layer links and manifest revision links), checks that the blob
// has the reverse link for it, and writes back the ones that are missing.
// Reverse links are the source of truth GC deletes by; a hole in them
// (a file deleted by hand, a bad restore, a partial copy, a writer that
// bypassed the middleware) lets a collect of another repository delete a
// blob this one still links. The scrub finds such holes without any
// request walking the registry: the repositories are taken from the
// catalog after a cursor kept in Redis (ScrubCursor, like the usage
// refresh's), so the instances together visit every repository once per
// pass and a tick's cost is that of ScrubRepos repositories, whatever
// the registry holds.
//
// A forward link whose reverse link is absent is looked at again before
// the write (a client's delete removes the forward link first). Writing a
// reverse link is always safe; a write that fails marks the link database
// incomplete (Config.MarkLinkDBIncomplete), so no blob is deleted on its
// strength until `linkdb verify --repair` made it whole. Anything the
// scrub cannot read is counted and logged, and the scrub goes on.

// DefaultScrubRepos is how many repositories a tick scrubs.
const DefaultScrubRepos = 2

// errHole: a reverse link is missing and could not be written back.
var errHole = errors.New("this repository's reverse link is missing and could not be written back")

// ScrubCursor keeps where the scrub stands in the catalog, shared by
// every instance (redisstate's ScrubCursor).
type ScrubCursor interface {
	// ScrubCursor is the last repository scrubbed ("" at the start).
	ScrubCursor(ctx context.Context) (string, error)
	SetScrubCursor(ctx context.Context, cursor string) error
}

// ScrubReport is what one tick's scrub did.
type ScrubReport struct {
	Repositories int // scrubbed
	Links        int // forward links checked
	Repaired     int // missing reverse links written back
	// Failed counts what could not be read or written: a listing, a
	// reverse link that could not be read (or is malformed), a write.
	Failed int
	// Unmarked: a write failed and the link database was marked
	// incomplete.
	Unmarked bool
}

// scrub spends the tick's scrub budget.
func (r *Reclaimer) scrub(ctx context.Context, rep *TickReport) {
	n, cur := scrubBudget(r.cfg), r.cfg.ScrubCursor
	if n <= 0 || rep.Abort == reclaim.AbortRedisUnavailable {
		return
	}
	ctx = r.cfg.Context(ctx)
	sr := &rep.Scrub
	fail := func(what string, err error) {
		sr.Failed++
		r.cfg.Logf("reclaimer: scrub: %s: %v", what, err)
	}
	last, err := cur.ScrubCursor(ctx)
	if err != nil {
		fail("cursor", err)
		return
	}
	names, err := layout.Repositories(ctx, r.cfg.Driver, last, n)
	if err != nil {
		fail("catalog", err)
		return
	}
	for _, repo := range names {
		if ctx.Err() != nil {
			return // the cursor stays: the next tick scrubs them again
		}
		r.scrubRepo(ctx, repo, sr, fail)
	}
	next := "" // the end of the catalog: start again
	if len(names) == n {
		next = names[len(names)-1]
	}
	if err := cur.SetScrubCursor(ctx, next); err != nil {
		fail("set cursor", err)
	}
}

// scrubRepo checks every forward link of repo, the reclaimer's workers at
// a time.
func (r *Reclaimer) scrubRepo(ctx context.Context, repo string, sr *ScrubReport, fail func(string, error)) {
	sr.Repositories++
	var mu sync.Mutex
	var links, repaired atomic.Int64
	g := new(errgroup.Group)
	g.SetLimit(max(r.cfg.Workers, 1))
	for _, set := range []struct {
		dir  string
		kind reclaim.LinkKind
	}{{layout.LayersDir(repo), reclaim.LinkLayer}, {layout.RevisionsDir(repo), reclaim.LinkManifest}} {
		err := listLinkDigests(ctx, r.cfg.Driver, set.dir, func(d digest.Digest) {
			g.Go(func() error {
				links.Add(1)
				ok, err := r.scrubLink(ctx, d, reclaim.RepoLink{Repo: repo, Kind: set.kind})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					fail(fmt.Sprintf("%s %s %s", repo, set.kind, d), err)
					if errors.Is(err, errHole) && !sr.Unmarked {
						sr.Unmarked = true
						r.unmarkLinkDB(ctx, fail)
					}
				case ok:
					repaired.Add(1)
					r.cfg.Logf("reclaimer: scrub: %s %s %s had no reverse link: written back", repo, set.kind, d)
				}
				return nil
			})
		})
		if err != nil {
			mu.Lock()
			fail("list "+set.dir, err)
			mu.Unlock()
		}
	}
	_ = g.Wait()
	sr.Links += int(links.Load())
	sr.Repaired += int(repaired.Load())
}

// scrubLink makes sure forward link (d, l) has its reverse link. repaired
// is true when it wrote it; an error wrapping errHole means it was missing
// and could not be written.
func (r *Reclaimer) scrubLink(ctx context.Context, d digest.Digest, l reclaim.RepoLink) (repaired bool, err error) {
	fix := r.cfg.Repair
	ok, err := fix.Has(ctx, d, l)
	if ok || err != nil {
		// a malformed reverse link still counts as a link for GC (it
		// keeps the blob); `linkdb verify` reports it
		return false, err
	}
	if _, err := r.cfg.Driver.Stat(ctx, layout.ForwardLinkPath(l.Repo, d, l.Kind)); layout.IsNotFound(err) {
		return false, nil // deleted since the listing, reverse link after it
	}
	if err := fix.Put(ctx, d, l); err != nil {
		return false, fmt.Errorf("%w: %v", errHole, err)
	}
	return true, nil
}

func (r *Reclaimer) unmarkLinkDB(ctx context.Context, fail func(string, error)) {
	if m := r.cfg.MarkLinkDBIncomplete; m != nil {
		if err := m(ctx); err != nil {
			fail("mark the link database incomplete", err)
		}
	}
}

// listLinkDigests calls fn with the digest of every link directory under
// dir (<dir>/<alg>/<encoded>): two listings for one algorithm, no call
// per link. A dir that does not exist has none.
func listLinkDigests(ctx context.Context, d interface {
	List(ctx context.Context, p string) ([]string, error)
}, dir string, fn func(digest.Digest)) error {
	algs, err := d.List(ctx, dir)
	if layout.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, a := range algs {
		entries, err := d.List(ctx, a)
		if layout.IsNotFound(err) {
			continue
		}
		if err != nil {
			return err
		}
		for _, e := range entries {
			dg := digest.NewDigestFromEncoded(digest.Algorithm(path.Base(a)), path.Base(e))
			if dg.Validate() == nil {
				fn(dg)
			}
		}
	}
	return nil
}
