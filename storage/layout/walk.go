package layout

import (
	"context"
	"errors"
	"path"
	"sort"
	"strings"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/opencontainers/go-digest"
)

// Shards lists the blob store's shard directories, blobs/<alg>/<hex[:2]>,
// sorted. The shard is the unit of parallel work and of checkpointing over
// the blob store: 256 per algorithm, however many blobs there are. A blob
// store (or an algorithm directory) that does not exist has no shards.
func Shards(ctx context.Context, d storagedriver.StorageDriver) ([]string, error) {
	algs, err := d.List(ctx, BlobsRoot)
	if IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	sort.Strings(algs)
	var out []string
	for _, a := range algs {
		s, err := d.List(ctx, a)
		if IsNotFound(err) {
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

// Blob is one blob directory as WalkShard saw it.
type Blob struct {
	Dir     string // BlobDir(Digest)
	Digest  digest.Digest
	HasData bool
	Size    int64 // of its data
	// Reverse counts the entries at its reverse link paths: link files,
	// and anything else there (a directory), which still counts as a link.
	Reverse int
	// Held counts its trash holds (PathTrashHold): they keep its data
	// like reverse links, but stand for no forward link.
	Held int
	// Unreadable is set when part of the directory could not be read: what
	// it holds is unknown, so the blob must never be taken as unreferenced.
	Unreadable string
}

// ShardVisitor receives a shard's walk, on the walking goroutine. Reverse,
// if set, is called once for every entry at a reverse link path (p is its
// classification); Blob once per blob directory, after its reverse links.
type ShardVisitor struct {
	Reverse func(b *Blob, fi storagedriver.FileInfo, p Path)
	Blob    func(b *Blob)
}

// WalkShard streams shard (one of Shards) through v. It first uses the
// driver's Walk (one paginated listing per shard on object stores). If that
// fails part way, it finishes the shard listing one directory at a time, so
// an unreadable directory costs only the blob it belongs to: that blob is
// delivered with Unreadable set, and the rest of the shard is walked. The
// error is ctx's, or the shard's own listing's (the whole shard is unknown).
func WalkShard(ctx context.Context, d storagedriver.StorageDriver, shard string, v ShardVisitor) error {
	w := &shardWalk{ctx: ctx, v: v, delivered: map[string]bool{}}
	err := d.Walk(ctx, shard, w.visit)
	if err == nil || IsNotFound(err) {
		w.flush()
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return w.resume(d, shard)
}

// shardWalk groups a shard's entries by blob directory.
type shardWalk struct {
	ctx      context.Context
	v        ShardVisitor
	cur      *Blob
	lastDone string // the last blob directory fully delivered
	// reverse links of cur already delivered, so that resume does not
	// deliver them twice; bounded by the links of one blob.
	delivered map[string]bool
}

func (w *shardWalk) flush() {
	if w.cur == nil {
		return
	}
	if w.v.Blob != nil {
		w.v.Blob(w.cur)
	}
	w.lastDone = w.cur.Dir
	w.cur = nil
}

// begin starts blob directory dir of d, unless it is the current one.
func (w *shardWalk) begin(d digest.Digest) {
	if w.cur != nil && w.cur.Digest == d {
		return
	}
	w.flush()
	w.cur = &Blob{Dir: BlobDir(d), Digest: d}
	clear(w.delivered)
}

func (w *shardWalk) visit(fi storagedriver.FileInfo) error {
	if err := w.ctx.Err(); err != nil {
		return err
	}
	p := Classify(fi.Path())
	switch p.Kind {
	case PathBlobDir:
		w.begin(p.Digest)
	case PathBlobData:
		w.begin(p.Digest)
		if !fi.IsDir() {
			w.cur.HasData, w.cur.Size = true, fi.Size()
		}
	case PathTrashHold:
		w.begin(p.Digest)
		w.cur.Held++
	case PathReverseLink:
		// A directory at a reverse link path counts too: it is never
		// "no reverse link"; the visitor reports it.
		w.begin(p.Digest)
		w.cur.Reverse++
		if !w.delivered[fi.Path()] {
			w.delivered[fi.Path()] = true
			if w.v.Reverse != nil {
				w.v.Reverse(w.cur, fi, p)
			}
		}
	}
	return nil
}

// resume redoes the blob directory the walk stopped in, and every one after
// it, one directory listing at a time.
func (w *shardWalk) resume(d storagedriver.StorageDriver, shard string) error {
	failed := ""
	if w.cur != nil {
		failed = w.cur.Dir
	}
	w.cur = nil
	children, err := d.List(w.ctx, shard)
	if err != nil {
		return err
	}
	sort.Strings(children)
	for _, dir := range children {
		c := Classify(dir)
		if dir <= w.lastDone || c.Kind != PathBlobDir {
			continue
		}
		w.cur = &Blob{Dir: dir, Digest: c.Digest}
		if dir != failed {
			clear(w.delivered)
		}
		tolerantWalk(w.ctx, d, dir, w.visit, func(p string, err error) {
			w.cur.Unreadable = p + ": " + err.Error()
		})
		if err := w.ctx.Err(); err != nil {
			return err
		}
		w.flush()
	}
	return nil
}

// tolerantWalk is storagedriver.WalkFallback, except that a directory it
// cannot list or an entry it cannot stat goes to onErr and the walk carries
// on with the rest.
func tolerantWalk(ctx context.Context, d storagedriver.StorageDriver, from string, f storagedriver.WalkFn, onErr func(string, error)) {
	children, err := d.List(ctx, from)
	if err != nil {
		if !IsNotFound(err) {
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
			if !IsNotFound(err) {
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

// Repositories lists up to n repository names after last (by path
// component, the order Distribution's catalog uses), walking the storage
// tree and stopping once it has n: a page costs what the page holds, not
// what the registry holds.
func Repositories(ctx context.Context, d storagedriver.StorageDriver, last string, n int) ([]string, error) {
	var hint string
	if last != "" {
		hint = ManifestsDir(last)
	}
	var out []string
	err := d.Walk(ctx, RepositoriesRoot, func(fi storagedriver.FileInfo) error {
		repo := strings.TrimPrefix(fi.Path(), RepositoriesRoot+"/")
		_, file := path.Split(repo)
		if !strings.HasPrefix(file, "_") {
			return nil
		}
		if repo = strings.TrimSuffix(repo, "/_manifests"); file == "_manifests" && after(repo, last) {
			out = append(out, repo)
			if len(out) == n {
				return storagedriver.ErrFilledBuffer
			}
		}
		return storagedriver.ErrSkipDir
	}, storagedriver.WithStartAfterHint(hint))
	if err != nil && !errors.Is(err, storagedriver.ErrFilledBuffer) && !IsNotFound(err) {
		return out, err
	}
	return out, nil
}

// after orders repository names as the walk does: path component by
// component.
func after(repo, last string) bool {
	return last == "" || strings.ReplaceAll(repo, "/", "\x00") > strings.ReplaceAll(last, "/", "\x00")
}
