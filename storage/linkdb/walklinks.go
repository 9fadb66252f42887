package linkdb

import (
	"context"
	"fmt"
	"path"
	"sort"
	"strings"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/opencontainers/go-digest"
	"golang.org/x/sync/errgroup"

	"github.com/reclaim-registry/reclaim/storage/layout"
)

// linkConcurrency is how many links of one repository are checked at once,
// on top of Workers repositories: object stores are latency-bound.
const linkConcurrency = 8

// linkEntry is one thing walkLinks found at a link path. Bad says why it is
// not a link file (a directory, an entry Stat cannot see); Info is nil for an
// entry Stat cannot see.
type linkEntry struct {
	Path string
	Info storagedriver.FileInfo
	Bad  string
}

// forwardLink is a forward link walkForwardLinks found: Repo links Blob as
// Kind, at Path.
type forwardLink struct {
	linkEntry
	Repo string
	Kind layout.LinkKind
	Blob digest.Digest
}

// walkForwardLinks hands every layer link of repo, then every revision link,
// to fn, including what sits at a link path but is not a link file (Bad set).
// Each costs fn a few round trips, so up to linkConcurrency run at once. A
// link set whose walk fails goes to walkErr, whose error stops the walk.
func walkForwardLinks(ctx context.Context, d storagedriver.StorageDriver, repo string, fn func(l forwardLink), walkErr func(base string, err error) error) error {
	isForward := func(p string) bool {
		c := layout.Classify(p)
		return (c.Kind == layout.KindLayerLink || c.Kind == layout.KindRevisionLink) && c.Repo == repo
	}
	for _, set := range []struct {
		base string
		kind layout.LinkKind
	}{
		{layout.LayersDir(repo), layout.LinkLayer},
		{layout.RevisionsDir(repo), layout.LinkManifest},
	} {
		// g.Go blocks at the limit, which holds the walk back.
		g := new(errgroup.Group)
		g.SetLimit(linkConcurrency)
		err := walkLinks(ctx, d, set.base, isForward, func(e linkEntry) error {
			l := forwardLink{linkEntry: e, Repo: repo, Kind: set.kind, Blob: layout.Classify(e.Path).Digest}
			g.Go(func() error { fn(l); return nil })
			return ctx.Err()
		})
		_ = g.Wait() // fn reports its own failures
		if err != nil {
			if err := walkErr(set.base, err); err != nil {
				return err
			}
		}
	}
	return nil
}

// referrerLink is an entry of repo's referrers index walkReferrers found:
// Referrer has Subject as its subject.
type referrerLink struct {
	linkEntry
	Subject, Referrer digest.Digest
}

// walkReferrers hands every entry of repo's referrers index to fn, on the
// walking goroutine, including what is not a link file (Bad set).
func walkReferrers(ctx context.Context, d storagedriver.StorageDriver, repo string, fn func(l referrerLink)) error {
	isReferrer := func(p string) bool {
		c := layout.Classify(p)
		return c.Kind == layout.KindReferrerLink && c.Repo == repo
	}
	return walkLinks(ctx, d, layout.ReferrersIndexDir(repo), isReferrer, func(e linkEntry) error {
		c := layout.Classify(e.Path)
		fn(referrerLink{linkEntry: e, Subject: c.Digest, Referrer: c.Referrer})
		return ctx.Err()
	})
}

// walkLinks streams what sits at every link path under base (a repository's
// _layers, _manifests/revisions, referrers or tags directory) to fn: link
// files, and anything else at a link path, with Bad set. isLink says whether
// a path is a link path. Missing base is an empty part, not an error.
//
// Walk leaves out an entry it cannot stat: a dangling symlink at a link path
// would be invisible, and a link that Distribution cannot read would look
// absent. So a directory that should hold a link file (isLink(dir+"/link"))
// where the walk saw none is listed once more afterwards; that costs nothing
// on a healthy tree. A walk a concurrent delete cut short resumes after the
// last entry it delivered (walkAttempts times at most).
func walkLinks(ctx context.Context, d storagedriver.StorageDriver, base string, isLink func(p string) bool, fn func(e linkEntry) error) error {
	w := &linkWalk{ctx: ctx, isLink: isLink, fn: fn, state: map[string]uint8{}}
	if err := w.walk(d, base); err != nil {
		return err
	}
	for _, dir := range w.unseen() {
		e, ok, err := probeLink(ctx, d, dir+"/link")
		if err != nil {
			return err
		}
		if ok {
			if err := fn(e); err != nil {
				return err
			}
		}
	}
	return nil
}

// walkAttempts bounds how often walkLinks resumes a walk that a concurrent
// delete cut short.
const walkAttempts = 5

// linkWalk is the state of one walkLinks.
type linkWalk struct {
	ctx    context.Context
	isLink func(p string) bool
	fn     func(e linkEntry) error
	// per directory: 1 seen as a directory that should hold a link, 2 its
	// link file seen. Entries leave as soon as both are seen, whatever the
	// order the driver walks in, so the map stays small.
	state map[string]uint8
	last  string // the last entry the walk delivered
}

func (w *linkWalk) mark(dir string, bit uint8) {
	if w.state[dir] |= bit; w.state[dir] == 3 {
		delete(w.state, dir)
	}
}

func (w *linkWalk) visit(fi storagedriver.FileInfo) error {
	if err := w.ctx.Err(); err != nil {
		return err
	}
	p := fi.Path()
	if w.last != "" && !walksAfter(p, w.last) {
		return nil // delivered before the walk was cut short
	}
	w.last = p
	if fi.IsDir() {
		if w.isLink(p + "/link") {
			w.mark(p, 1)
		}
		if w.isLink(p) {
			w.mark(path.Dir(p), 2)
			return w.fn(linkEntry{Path: p, Info: fi, Bad: "a directory, not a link file"})
		}
		return nil
	}
	if path.Base(p) != "link" || !w.isLink(p) {
		return nil
	}
	w.mark(path.Dir(p), 2)
	return w.fn(linkEntry{Path: p, Info: fi})
}

// walk walks base. A walk that lists one directory at a time (the filesystem
// driver) ends with "not found" when a directory it listed is deleted before
// it enters it: not the end of base. It resumes after the last entry.
func (w *linkWalk) walk(d storagedriver.StorageDriver, base string) error {
	for attempt := 1; ; attempt++ {
		var opts []func(*storagedriver.WalkOptions)
		if w.last != "" {
			opts = append(opts, storagedriver.WithStartAfterHint(w.last))
		}
		err := d.Walk(w.ctx, base, w.visit, opts...)
		if !layout.IsNotFound(err) {
			return err
		}
		_, serr := d.Stat(w.ctx, base)
		if layout.IsNotFound(serr) {
			return nil // base is gone (or never was): nothing (more) to walk
		}
		if serr != nil {
			return serr
		}
		if attempt == walkAttempts {
			return fmt.Errorf("walk %s: cut short by concurrent deletes %d times: %w", base, attempt, err)
		}
	}
}

// unseen returns, sorted, the directories that should hold a link file
// where the walk saw none.
func (w *linkWalk) unseen() []string {
	var dirs []string
	for dir, st := range w.state {
		if st == 1 {
			dirs = append(dirs, dir)
		}
	}
	sort.Strings(dirs)
	return dirs
}

// walksAfter reports whether a walk in depth-first order, siblings sorted
// (WalkFallback's order), reaches p after q: component by component, a
// directory before what it holds.
func walksAfter(p, q string) bool {
	pc, qc := strings.Split(p, "/"), strings.Split(q, "/")
	for i := 0; i < len(pc) && i < len(qc); i++ {
		if pc[i] != qc[i] {
			return pc[i] > qc[i]
		}
	}
	return len(pc) > len(qc)
}

// probeLink looks at link path p through the listing of its directory. ok is
// false when nothing named p is listed (a write in flight, an interrupted
// delete, or the directory is gone).
func probeLink(ctx context.Context, d storagedriver.StorageDriver, p string) (e linkEntry, ok bool, err error) {
	e.Path = p
	ok, e.Info, e.Bad, err = layout.Probe(ctx, d, p)
	return e, ok, err
}
