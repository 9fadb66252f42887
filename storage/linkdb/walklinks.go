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

	"github.com/reclaim-registry/reclaim/reclaim"
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
// Kind, at Path. Content is what the link file holds; ReadErr is set when
// it could not be read, Bad when what sits at Path is not a link file.
type forwardLink struct {
	linkEntry
	Repo    string
	Kind    reclaim.LinkKind
	Blob    digest.Digest
	Content []byte
	ReadErr error
}

// walkForwardLinks hands every layer link of repo, then every revision link,
// to fn, with its content read, including what sits at a link path but is
// not a link file (Bad set). A link deleted while it looks is left out. Up
// to linkConcurrency links are read and handed to fn at once. A link set
// whose listing fails goes to walkErr, whose error stops the walk.
//
// It lists <set>/<alg>, one directory of link directories, and reads each
// <alg>/<hex>/link directly: no Stat and no listing per link (the
// filesystem driver's Walk lists every link's directory and stats every
// entry, three system calls more per link than the read that follows
// anyway). Where the read finds no file, the listing of the link's
// directory decides, as Walk's would have: nothing there (deleted
// meanwhile), a directory, or an entry Stat cannot see (a dangling
// symlink, which Walk leaves out).
func walkForwardLinks(ctx context.Context, d storagedriver.StorageDriver, repo string, fn func(l forwardLink), walkErr func(base string, err error) error) error {
	for _, set := range []struct {
		base string
		kind reclaim.LinkKind
		want layout.PathKind
	}{
		{layout.LayersDir(repo), reclaim.LinkLayer, layout.PathLayerLink},
		{layout.RevisionsDir(repo), reclaim.LinkManifest, layout.PathRevisionLink},
	} {
		// g.Go blocks at the limit, which holds the listing back.
		g := new(errgroup.Group)
		g.SetLimit(linkConcurrency)
		err := listLinkDirs(ctx, d, set.base, func(p string) (digest.Digest, bool) {
			c := layout.Classify(p)
			return c.Digest, c.Kind == set.want && c.Repo == repo
		}, func(dir string, blob digest.Digest) {
			g.Go(func() error {
				if l, ok := readForwardLink(ctx, d, forwardLink{linkEntry: linkEntry{Path: dir + "/link"}, Repo: repo, Kind: set.kind, Blob: blob}); ok {
					fn(l)
				}
				return nil
			})
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

// listLinkDirs hands fn, sorted, every directory base/<alg>/<hex> whose
// link file path isLink accepts (and the digest it names). Missing base is
// an empty set; a file where a directory of link directories should be is
// not a link set and is skipped.
func listLinkDirs(ctx context.Context, d storagedriver.StorageDriver, base string, isLink func(p string) (digest.Digest, bool), fn func(dir string, blob digest.Digest)) error {
	algs, err := d.List(ctx, base)
	if layout.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	sort.Strings(algs)
	for _, alg := range algs {
		if !digest.Algorithm(path.Base(alg)).Available() {
			continue // holds no link path
		}
		dirs, err := d.List(ctx, alg)
		if layout.IsNotFound(err) {
			continue
		}
		if err != nil {
			if fi, serr := d.Stat(ctx, alg); serr == nil && !fi.IsDir() {
				continue
			}
			return err
		}
		sort.Strings(dirs)
		for _, dir := range dirs {
			if err := ctx.Err(); err != nil {
				return err
			}
			if blob, ok := isLink(dir + "/link"); ok {
				fn(dir, blob)
			}
		}
	}
	return nil
}

// readForwardLink reads link l. ok is false when nothing is at its path
// (deleted while we look, or its directory is a file).
func readForwardLink(ctx context.Context, d storagedriver.StorageDriver, l forwardLink) (_ forwardLink, ok bool) {
	b, err := d.GetContent(ctx, l.Path)
	if err == nil {
		l.Content = b
		return l, true
	}
	present, fi, problem, perr := layout.Probe(ctx, d, l.Path)
	switch {
	case perr != nil:
		if fi, serr := d.Stat(ctx, path.Dir(l.Path)); layout.IsNotFound(serr) || (serr == nil && !fi.IsDir()) {
			return l, false
		}
		if layout.IsNotFound(err) {
			err = perr
		}
		l.ReadErr = err
		return l, true
	case !present:
		return l, false
	case problem != "":
		l.Info, l.Bad = fi, problem
		return l, true
	}
	// A file after all: it appeared meanwhile, or the read failed.
	l.Info = fi
	if l.Content, l.ReadErr = d.GetContent(ctx, l.Path); layout.IsNotFound(l.ReadErr) {
		return l, false
	}
	return l, true
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
		return c.Kind == layout.PathReferrerLink && c.Repo == repo
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
