package linkdb

import (
	"context"
	"path"
	"sort"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/opencontainers/go-digest"
	"golang.org/x/sync/errgroup"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// walksByListing reports whether d's Walk is WalkFallback (a List of every
// directory and a Stat of every entry): the filesystem and in-memory
// drivers. Their blob phase lists only what leads to reverse links
// (listShard). The object stores' Walk is one paginated listing per shard,
// far cheaper than a request per blob: they keep layout.WalkShard.
func walksByListing(d storagedriver.StorageDriver) bool {
	switch d.Name() {
	case "filesystem", "inmemory":
		return true
	}
	return false
}

// listShard hands every entry at a reverse link path in shard to
// r.reverseLink, as layout.WalkShard does, but without its Stat of every
// directory and of every blob's data: per blob it lists _repositories (one
// failed open when the blob has no reverse link) and the repositories'
// directories below it, and stats each kind's link without listing the
// kind's directory. Blobs are looked at
// linkConcurrency at once. A blob directory that cannot be read is reported
// unreadable and the rest of the shard is walked; the error is ctx's, or the
// shard listing's own (the whole shard is unknown).
func (r *rebuild) listShard(ctx context.Context, shard string) error {
	dirs, err := r.d.List(ctx, shard)
	if layout.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	sort.Strings(dirs)
	g := new(errgroup.Group)
	g.SetLimit(linkConcurrency)
	for _, dir := range dirs {
		if ctx.Err() != nil {
			break
		}
		c := layout.Classify(dir)
		if c.Kind != layout.PathBlobDir {
			continue
		}
		g.Go(func() error {
			if p, err := r.listReverse(ctx, c.Digest, layout.ReverseLinksDir(c.Digest)); err != nil && ctx.Err() == nil {
				r.f.add(Problem{Kind: Unreadable, Path: dir, Digest: c.Digest, Detail: p + ": " + err.Error()})
			}
			return nil
		})
	}
	_ = g.Wait()
	return ctx.Err()
}

// listReverse walks dir, blob's _repositories or a directory below it,
// handing what sits at a reverse link path to r.reverseLink. A child that is
// not a directory and not at a link path (a write's temporary file) is
// skipped. On error it returns the path it could not read.
func (r *rebuild) listReverse(ctx context.Context, blob digest.Digest, dir string) (string, error) {
	children, err := r.d.List(ctx, dir)
	if layout.IsNotFound(err) {
		return "", nil // no reverse links, or removed while we look
	}
	if err != nil {
		if fi, serr := r.d.Stat(ctx, dir); serr == nil && !fi.IsDir() {
			return "", nil
		}
		return dir, err
	}
	sort.Strings(children)
	for _, c := range children {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		if p := layout.Classify(c); p.Kind == layout.PathReverseLink && p.Digest == blob {
			if p, err := r.reverseAt(ctx, blob, c, p); err != nil {
				return p, err
			}
			continue
		}
		if k := reclaim.LinkKind(path.Base(c)); k == reclaim.LinkLayer || k == reclaim.LinkManifest {
			// A kind's directory (<repository>/_layers): the only reverse
			// link below it is its "link" (one deeper would name a
			// repository with a component that starts with "_", which
			// the grammar forbids), so look at that instead of listing.
			if p := layout.Classify(c + "/link"); p.Kind == layout.PathReverseLink && p.Digest == blob {
				if p, err := r.reverseAt(ctx, blob, c+"/link", p); err != nil {
					return p, err
				}
			}
			continue
		}
		if p, err := r.listReverse(ctx, blob, c); err != nil {
			return p, err
		}
	}
	return "", nil
}

// reverseAt hands what sits at reverse link path c (p classifies it) to
// r.reverseLink; nothing there is fine (deleted since the listing, or an
// entry Stat cannot see: Walk leaves both out). A directory there counts as
// a link too, as in WalkShard, and is walked. On error it returns the path
// it could not read.
func (r *rebuild) reverseAt(ctx context.Context, blob digest.Digest, c string, p layout.Path) (string, error) {
	fi, err := r.d.Stat(ctx, c)
	switch {
	case layout.IsNotFound(err):
		return "", nil
	case err != nil:
		if fi, serr := r.d.Stat(ctx, path.Dir(c)); serr == nil && !fi.IsDir() {
			return "", nil // a file where the kind's directory should be
		}
		return c, err
	}
	r.reverse.Add(1)
	r.opts.Progress.link()
	r.reverseLink(ctx, fi, p)
	if !fi.IsDir() {
		return "", nil
	}
	return r.listReverse(ctx, blob, c)
}
