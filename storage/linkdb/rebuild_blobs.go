package linkdb

import (
	"context"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// shards is phase 2: remove reverse links whose forward link is gone.
// failed is true when some shard could not be walked.
func (r *rebuild) shards(ctx context.Context) (failed bool, err error) {
	all, err := layout.Shards(ctx, r.d)
	if err != nil {
		if ctx.Err() != nil {
			return true, ctx.Err()
		}
		r.f.add(Problem{Kind: Unreadable, Path: layout.BlobsRoot, Detail: err.Error()})
		return true, nil
	}
	r.res.Shards = len(all)
	v := layout.ShardVisitor{
		Reverse: func(_ *layout.Blob, fi storagedriver.FileInfo, p layout.Path) {
			r.reverse.Add(1)
			r.opts.Progress.link()
			r.reverseLink(ctx, fi, p)
		},
		Blob: func(b *layout.Blob) {
			if b.Unreadable != "" {
				r.f.add(Problem{Kind: Unreadable, Path: b.Dir, Digest: b.Digest, Detail: b.Unreadable})
			}
		},
	}
	skipped, failed, err := r.phase(ctx, "blobs", all, r.doneShards, r.opts.shardDone, func(shard string) bool {
		var err error
		if walksByListing(r.d) {
			err = r.listShard(ctx, shard)
		} else {
			err = layout.WalkShard(ctx, r.d, shard, v)
		}
		if err != nil && ctx.Err() == nil {
			r.f.add(Problem{Kind: Unreadable, Path: shard, Detail: err.Error()})
		}
		return err == nil
	})
	r.res.ShardsSkipped = skipped
	return failed, err
}

// reverseLink removes the reverse link at fi (p classifies it) when its
// forward link is gone.
func (r *rebuild) reverseLink(ctx context.Context, fi storagedriver.FileInfo, p layout.Path) {
	fwd := layout.ForwardLinkPath(p.Repo, p.Digest, p.LinkKind)
	_, err := r.d.Stat(ctx, fwd)
	switch {
	case err == nil:
	case layout.IsNotFound(err):
		r.removeStale(ctx, stale{kind: StaleReverse, link: reclaim.Object{Blob: p.Digest, Repo: p.Repo, Kind: p.LinkKind},
			forward: fwd, victim: fi.Path(), modTime: fi.ModTime()})
	default:
		r.f.add(Problem{Kind: Unreadable, Path: fwd, Repo: p.Repo, Digest: p.Digest, Detail: err.Error()})
	}
}
