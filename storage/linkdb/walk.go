package linkdb

import (
	"context"
	"fmt"
	"path"
	"sort"
	"strings"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// repositories lists every repository under repositories/, sorted. A
// directory is a repository when it has a child whose name starts with "_"
// (_layers, _manifests, _uploads); a repository name component never starts
// with "_", so everything else is a path component to descend into. It uses
// List one directory level at a time, which is one delimited listing per
// level on object stores, and never touches link files.
//
// A directory that cannot be listed is returned in unreadable: the caller
// must treat repositories below it as unknown, not as absent.
func repositories(ctx context.Context, d storagedriver.StorageDriver) (repos []string, unreadable []Problem, err error) {
	var visit func(dir string) error
	visit = func(dir string) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		children, err := d.List(ctx, dir)
		if err != nil {
			if layout.IsNotFound(err) {
				return nil // empty registry, or removed while we walk
			}
			unreadable = append(unreadable, Problem{Kind: Unreadable, Path: dir, Detail: err.Error()})
			return nil
		}
		sort.Strings(children)
		isRepo := false
		for _, c := range children {
			base := path.Base(c)
			if strings.HasPrefix(base, "_") {
				isRepo = true
				continue
			}
			if strings.HasPrefix(base, ".") {
				continue // not a valid name component; editor or OS litter
			}
			if err := visit(c); err != nil {
				return err
			}
		}
		if isRepo && dir != reposDir {
			repos = append(repos, strings.TrimPrefix(dir, reposDir+"/"))
		}
		return nil
	}
	if err := visit(reposDir); err != nil {
		return nil, nil, err
	}
	sort.Strings(repos)
	return repos, unreadable, nil
}

// shards lists the blob store's shard directories, blobs/<alg>/<2>, sorted.
// The shard is the unit of parallel work and of checkpointing in the blob
// phase: 256 units per algorithm, independent of the number of blobs.
func shards(ctx context.Context, d storagedriver.StorageDriver) ([]string, error) {
	algs, err := d.List(ctx, blobsDir)
	if layout.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	sort.Strings(algs)
	var out []string
	for _, a := range algs {
		s, err := d.List(ctx, a)
		if layout.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		sort.Strings(s)
		out = append(out, s...)
	}
	return out, nil
}

// blobEntry is one blob directory as the blob walk saw it. Reverse links are
// delivered one by one through onReverse; blobEntry only carries what is
// needed once per blob.
type blobEntry struct {
	dir      string
	path     blobPath
	hasData  bool
	dataSize int64
	reverse  int  // reverse links seen
	unknown  bool // part of the blob directory could not be read
	detail   string
}

// blobVisitor receives the blob walk's results. onReverse is called for every
// reverse link path that holds a file or a directory, in walk order; onBlob once per blob directory after all
// of its reverse links. Both run on the walking goroutine.
type blobVisitor struct {
	onReverse func(b *blobEntry, fi storagedriver.FileInfo, bp blobPath)
	onBlob    func(b *blobEntry)
}

// walkShard streams one shard through v. It first uses the driver's Walk
// (one paginated listing per shard on object stores). If that fails part
// way, it finishes the shard with a List-per-directory walk that isolates the
// failure to the blob whose directory could not be read, so one unreadable
// directory never hides the rest of the shard and never makes a blob look
// unreferenced (it is reported with unknown set).
func walkShard(ctx context.Context, d storagedriver.StorageDriver, shard string, v blobVisitor) error {
	var cur *blobEntry
	lastDone := "" // the last blob directory fully delivered
	// reverse links of cur already delivered, so the fallback below does not
	// deliver them twice; bounded by the links of one blob.
	delivered := map[string]bool{}
	flush := func() {
		if cur != nil {
			v.onBlob(cur)
			lastDone = cur.dir
			cur = nil
		}
	}
	visit := func(fi storagedriver.FileInfo) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		bp, ok := parseBlobPath(fi.Path())
		if !ok {
			return nil
		}
		if cur == nil || cur.dir != bp.dir {
			flush()
			cur = &blobEntry{dir: bp.dir, path: bp}
			clear(delivered)
		}
		switch {
		case bp.isData && !fi.IsDir():
			cur.hasData, cur.dataSize = true, fi.Size()
		case bp.reverse:
			// A directory at a reverse link path counts too: it is
			// never "no reverse link"; onReverse reports it.
			cur.reverse++
			if !delivered[fi.Path()] {
				delivered[fi.Path()] = true
				v.onReverse(cur, fi, bp)
			}
		}
		return nil
	}
	err := d.Walk(ctx, shard, visit)
	if err == nil || layout.IsNotFound(err) {
		flush()
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	// The walk stopped inside cur (or between blobs). Redo cur and everything
	// after it directory by directory.
	failed := ""
	if cur != nil {
		failed = cur.dir
	}
	cur = nil
	children, lerr := d.List(ctx, shard)
	if lerr != nil {
		return lerr // the shard itself is unreadable; the caller reports it
	}
	sort.Strings(children)
	for _, dir := range children {
		if dir <= lastDone {
			continue
		}
		bp, ok := parseBlobPath(dir)
		if !ok {
			continue
		}
		cur = &blobEntry{dir: dir, path: bp}
		if dir != failed {
			clear(delivered)
		}
		tolerantWalk(ctx, d, dir, visit, func(p string, err error) {
			cur.unknown = true
			cur.detail = p + ": " + err.Error()
		})
		if err := ctx.Err(); err != nil {
			return err
		}
		flush()
	}
	return nil
}

// tolerantWalk is WalkFallback that reports a directory it cannot list or an
// entry it cannot stat to onErr and carries on with the rest.
func tolerantWalk(ctx context.Context, d storagedriver.StorageDriver, from string, f storagedriver.WalkFn, onErr func(string, error)) {
	children, err := d.List(ctx, from)
	if err != nil {
		if !layout.IsNotFound(err) {
			onErr(from, err)
		}
		return
	}
	sort.Strings(children)
	for _, c := range children {
		if ctx.Err() != nil {
			return
		}
		fi, err := d.Stat(ctx, c)
		if err != nil {
			if !layout.IsNotFound(err) {
				onErr(c, err)
			}
			continue
		}
		if err := f(fi); err != nil {
			return
		}
		if fi.IsDir() {
			tolerantWalk(ctx, d, c, f, onErr)
		}
	}
}

// linkEntry is one thing walkLinks found at a link path. Bad says why it is
// not a link file (a directory, an entry Stat cannot see); Info is nil for an
// entry Stat cannot see.
type linkEntry struct {
	Path string
	Info storagedriver.FileInfo
	Bad  string
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
	// per directory: 1 seen as a directory that should hold a link, 2 its
	// link file seen. Entries leave as soon as both are seen, whatever the
	// order the driver walks in, so the map stays small.
	state := map[string]uint8{}
	mark := func(dir string, bit uint8) {
		if state[dir] |= bit; state[dir] == 3 {
			delete(state, dir)
		}
	}
	last := "" // the last entry the walk delivered
	visit := func(fi storagedriver.FileInfo) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		p := fi.Path()
		if last != "" && !walksAfter(p, last) {
			return nil // delivered before the walk was cut short
		}
		last = p
		if fi.IsDir() {
			if isLink(p + "/link") {
				mark(p, 1)
			}
			if isLink(p) {
				mark(path.Dir(p), 2)
				return fn(linkEntry{Path: p, Info: fi, Bad: "a directory, not a link file"})
			}
			return nil
		}
		if path.Base(p) != "link" || !isLink(p) {
			return nil
		}
		mark(path.Dir(p), 2)
		return fn(linkEntry{Path: p, Info: fi})
	}
	// A walk that lists one directory at a time (the filesystem driver)
	// ends with "not found" when a directory it listed is deleted before
	// it enters it: not the end of base. Resume after the last entry.
	for attempt := 1; ; attempt++ {
		var opts []func(*storagedriver.WalkOptions)
		if last != "" {
			opts = append(opts, storagedriver.WithStartAfterHint(last))
		}
		err := d.Walk(ctx, base, visit, opts...)
		if !layout.IsNotFound(err) {
			if err != nil {
				return err
			}
			break
		}
		_, serr := d.Stat(ctx, base)
		if layout.IsNotFound(serr) {
			break // base is gone (or never was): nothing (more) to walk
		}
		if serr != nil {
			return serr
		}
		if attempt == walkAttempts {
			return fmt.Errorf("walk %s: cut short by concurrent deletes %d times: %w", base, attempt, err)
		}
	}
	var dirs []string
	for dir, st := range state {
		if st == 1 {
			dirs = append(dirs, dir)
		}
	}
	sort.Strings(dirs)
	for _, dir := range dirs {
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
	for round := 0; ; round++ {
		if ok, err := layout.Listed(ctx, d, p); err != nil || !ok {
			return e, false, err
		}
		fi, err := d.Stat(ctx, p)
		switch {
		case layout.IsNotFound(err) && round == 0:
			// Deleted (perhaps re-created) between the listing and
			// the stat, or there to stay: look once more.
			continue
		case layout.IsNotFound(err):
			e.Bad = "listed, but not found by stat (a dangling symlink?)"
		case err != nil:
			return e, false, err
		case fi.IsDir():
			e.Info, e.Bad = fi, "a directory, not a link file"
		default:
			e.Info = fi // written since the walk passed
		}
		return e, true, nil
	}
}
