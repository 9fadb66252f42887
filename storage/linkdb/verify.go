package linkdb

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/storage/layout"
)

// VerifyOptions configure Verify.
type VerifyOptions struct {
	Workers     int // default 4
	MaxFindings int // findings kept per kind; counts are exact. Default 100.
	Progress    *Progress
	// MaxTracked bounds the set of blobs with a missing reverse link that
	// verify remembers so it never calls them reclaimable. Past it,
	// reclaimable blobs are not reported at all. Default 1<<20.
	MaxTracked int
	// Repair writes each missing reverse link verify finds (the rule
	// rebuild follows: an extra reverse link only makes GC keep more)
	// and, when the repositories phase found nothing else wrong, marks
	// the link database complete (verify_repair.go). Without it, a
	// missing reverse link removes the marker instead.
	Repair bool
}

func (o *VerifyOptions) defaults() {
	if o.Workers <= 0 {
		o.Workers = 4
	}
	if o.MaxFindings <= 0 {
		o.MaxFindings = 100
	}
	if o.MaxTracked <= 0 {
		o.MaxTracked = 1 << 20
	}
}

type verifier struct {
	d    storagedriver.StorageDriver
	opts VerifyOptions
	f    *findings

	forward, reverse, blobs, refs, tagLinks atomic.Int64
	repoUnreadable                          atomic.Bool

	mu       sync.Mutex
	linked   map[digest.Digest]struct{} // blobs with a forward link but no (readable) reverse link
	overflow bool

	links    *ReverseLinks // Repair writes through it
	repaired atomic.Int64  // missing reverse links written
	marker   markerState   // verify_repair.go
}

// Verify checks the link database against the forward links, read-only.
// Bad input (corrupt link files, unreadable directories) is reported, never
// fatal, and never makes a blob look unreferenced. The error is non-nil only
// when verify could not run at all or ctx ended.
func Verify(ctx context.Context, d storagedriver.StorageDriver, opts VerifyOptions) (*Report, error) {
	opts.defaults()
	v := &verifier{d: d, opts: opts, f: newFindings(opts.MaxFindings), linked: map[digest.Digest]struct{}{}, links: NewReverseLinks(d)}
	rep := &Report{Started: time.Now().UTC(), Repair: opts.Repair}
	began := time.Now()

	since, ok, err := LinkDBComplete(ctx, d)
	switch {
	case err != nil:
		v.f.add(Problem{Kind: Unreadable, Path: "reclaim/linkdb-complete", Detail: err.Error()})
	case ok:
		rep.CompleteSince = &since
		v.marker.present = true
	}
	if rep.Repositories, err = v.repositories(ctx); err != nil {
		return nil, err
	}
	v.markIfRepaired(ctx, rep)
	computable := v.reclaimableComputable()
	if err := v.blobStore(ctx, computable); err != nil {
		return nil, err
	}

	rep.Duration = time.Since(began)
	rep.ForwardLinks, rep.ReverseLinks = v.forward.Load(), v.reverse.Load()
	rep.Blobs, rep.ReferrerEntries, rep.TagLinks = v.blobs.Load(), v.refs.Load(), v.tagLinks.Load()
	rep.ReclaimableComputed = computable
	rep.ReverseRepaired = v.repaired.Load()
	rep.MarkerRemoved, rep.MarkerWritten = v.marker.removed, v.marker.written
	if !computable {
		rep.ReclaimableNote = "not computed: some forward links could not be read, or too many lack reverse links; blobs are not called reclaimable on partial knowledge"
	}
	rep.Counts, rep.Findings = v.f.report()
	rep.ReclaimableBytes = v.f.size(Reclaimable)
	rep.ExitCode = rep.exitCode()
	return rep, nil
}

// repositories checks every repository's links and returns how many there are.
func (v *verifier) repositories(ctx context.Context) (int, error) {
	repos, unreadable, err := repositories(ctx, v.d, v.opts.Workers)
	if err != nil {
		return 0, err
	}
	for _, p := range unreadable {
		v.f.add(p)
		v.repoUnreadable.Store(true)
	}
	v.opts.Progress.begin("repositories", len(repos), 0)
	err = each(ctx, v.opts.Workers, repos, func(repo string) {
		v.repo(ctx, repo)
		v.opts.Progress.unit()
	})
	v.opts.Progress.end()
	return len(repos), err
}

// blobStore checks every reverse link, and with computable, reports the
// blobs no repository links.
func (v *verifier) blobStore(ctx context.Context, computable bool) error {
	all, err := layout.Shards(ctx, v.d)
	if err != nil {
		v.f.add(Problem{Kind: Unreadable, Path: layout.BlobsRoot, Detail: err.Error()})
	}
	visitor := layout.ShardVisitor{
		Reverse: func(_ *layout.Blob, fi storagedriver.FileInfo, p layout.Path) { v.reverseLink(ctx, fi, p) },
		Blob:    func(b *layout.Blob) { v.blob(b, computable) },
	}
	v.opts.Progress.begin("blobs", len(all), 0)
	err = each(ctx, v.opts.Workers, all, func(shard string) {
		if err := layout.WalkShard(ctx, v.d, shard, visitor); err != nil && ctx.Err() == nil {
			v.f.add(Problem{Kind: Unreadable, Path: shard, Detail: err.Error()})
		}
		v.opts.Progress.unit()
	})
	v.opts.Progress.end()
	return err
}

func (v *verifier) reclaimableComputable() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return !v.overflow && !v.repoUnreadable.Load()
}

// keep remembers that blob d is linked although its reverse link is missing
// or unreadable, so the blob walk does not call it reclaimable.
func (v *verifier) keep(d digest.Digest) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.linked) >= v.opts.MaxTracked {
		v.overflow = true
		return
	}
	v.linked[d] = struct{}{}
}

func (v *verifier) unreadable(p Problem) {
	v.f.add(p)
	v.repoUnreadable.Store(true)
}

// reverseLink checks the reverse link at fi (p classifies it): a file
// holding its blob's digest, whose forward link exists.
func (v *verifier) reverseLink(ctx context.Context, fi storagedriver.FileInfo, p layout.Path) {
	v.reverse.Add(1)
	v.opts.Progress.link()
	problem := func(k Kind, path, detail string) {
		v.f.add(Problem{Kind: k, Path: path, Repo: p.Repo, Digest: p.Digest, Detail: detail})
	}
	if fi.IsDir() {
		// GC counts it as a link (and keeps the blob); rebuild cannot
		// replace a directory while registries serve.
		problem(Corrupt, fi.Path(), "a directory, not a link file")
		return
	}
	b, err := v.d.GetContent(ctx, fi.Path())
	if layout.IsNotFound(err) {
		return
	}
	if err != nil {
		problem(Unreadable, fi.Path(), err.Error())
	} else if !WellFormedLink(b, p.Digest) {
		problem(Corrupt, fi.Path(), "content: "+describe(b))
	}
	fwd := layout.ForwardLinkPath(p.Repo, p.Digest, p.LinkKind)
	if _, err := v.d.Stat(ctx, fwd); layout.IsNotFound(err) {
		problem(StaleReverse, fi.Path(), "")
	} else if err != nil {
		problem(Unreadable, fwd, err.Error())
	}
}

// blob reports b as reclaimable when it has data and nothing links it.
func (v *verifier) blob(b *layout.Blob, computable bool) {
	v.blobs.Add(1)
	if b.Unreadable != "" {
		v.f.add(Problem{Kind: Unreadable, Path: b.Dir, Digest: b.Digest, Detail: b.Unreadable})
		return // unknown, never unreferenced
	}
	if !b.HasData || b.Reverse > 0 || b.Held > 0 || !computable {
		return
	}
	v.mu.Lock()
	_, linked := v.linked[b.Digest]
	v.mu.Unlock()
	if !linked {
		v.f.add(Problem{Kind: Reclaimable, Path: b.Dir, Digest: b.Digest, Size: b.Size})
	}
}
