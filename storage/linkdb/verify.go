package linkdb

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/referrers"
	"golang.org/x/sync/errgroup"
)

// Exit codes of `registry linkdb verify`, most urgent first when several
// apply: a known risk beats "could not check everything", which beats leaks.
const (
	// ExitClean: the link database is sound (reclaimable blobs are normal).
	ExitClean = 0
	// ExitLeaks: only stale reverse links or stale referrers entries. Safe;
	// a rebuild removes them.
	ExitLeaks = 1
	// ExitDataLoss: forward links without reverse links, missing referrers
	// entries, corrupt link files, or links to missing blobs. Do not run GC
	// before a rebuild (and for broken links, before an operator looked).
	ExitDataLoss = 2
	// ExitIncomplete: verify could not read everything (or could not run at
	// all). What it printed is true, but it is not the whole picture.
	ExitIncomplete = 3
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
}

// Report is the outcome of Verify.
type Report struct {
	Started             time.Time      `json:"started"`
	Duration            time.Duration  `json:"duration_ns"`
	CompleteSince       *time.Time     `json:"complete_since,omitempty"` // the rebuild marker, if any
	Repositories        int            `json:"repositories"`
	ForwardLinks        int64          `json:"forward_links"`
	ReverseLinks        int64          `json:"reverse_links"`
	Blobs               int64          `json:"blobs"`
	ReferrerEntries     int64          `json:"referrer_entries"`
	TagLinks            int64          `json:"tag_links"`
	Counts              map[Kind]int64 `json:"counts"`
	ReclaimableBytes    int64          `json:"reclaimable_bytes"`
	ReclaimableComputed bool           `json:"reclaimable_computed"`
	ReclaimableNote     string         `json:"reclaimable_note,omitempty"`
	Findings            []Problem      `json:"findings"`
	ExitCode            int            `json:"exit_code"`
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
}

// Verify checks the link database against the forward links, read-only.
// Bad input (corrupt link files, unreadable directories) is reported, never
// fatal, and never makes a blob look unreferenced. The error is non-nil only
// when verify could not run at all or ctx ended.
func Verify(ctx context.Context, d storagedriver.StorageDriver, opts VerifyOptions) (*Report, error) {
	if opts.Workers <= 0 {
		opts.Workers = 4
	}
	if opts.MaxFindings <= 0 {
		opts.MaxFindings = 100
	}
	if opts.MaxTracked <= 0 {
		opts.MaxTracked = 1 << 20
	}
	v := &verifier{d: d, opts: opts, f: newFindings(opts.MaxFindings), linked: map[digest.Digest]struct{}{}}
	rep := &Report{Started: time.Now().UTC(), Counts: map[Kind]int64{}}
	began := time.Now()

	since, ok, err := LinkDBComplete(ctx, d)
	switch {
	case err != nil:
		v.f.add(Problem{Kind: Unreadable, Path: "reclaim/linkdb-complete", Detail: err.Error()})
	case ok:
		rep.CompleteSince = &since
	}

	repos, unreadable, err := repositories(ctx, d)
	if err != nil {
		return nil, err
	}
	for _, p := range unreadable {
		v.f.add(p)
		v.repoUnreadable.Store(true)
	}
	rep.Repositories = len(repos)
	opts.Progress.begin("repositories", len(repos), 0)
	g := new(errgroup.Group)
	g.SetLimit(opts.Workers)
	for _, repo := range repos {
		if ctx.Err() != nil {
			break
		}
		g.Go(func() error {
			v.repo(ctx, repo)
			opts.Progress.unit()
			return nil
		})
	}
	g.Wait()
	opts.Progress.end()
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	all, err := shards(ctx, d)
	if err != nil {
		v.f.add(Problem{Kind: Unreadable, Path: blobsDir, Detail: err.Error()})
	}
	opts.Progress.begin("blobs", len(all), 0)
	g = new(errgroup.Group)
	g.SetLimit(opts.Workers)
	computable := v.reclaimableComputable()
	for _, shard := range all {
		if ctx.Err() != nil {
			break
		}
		g.Go(func() error {
			err := walkShard(ctx, d, shard, blobVisitor{
				onReverse: func(b *blobEntry, fi storagedriver.FileInfo, bp blobPath) {
					v.reverseLink(ctx, fi, bp)
				},
				onBlob: func(b *blobEntry) { v.blob(b, computable) },
			})
			if err != nil && ctx.Err() == nil {
				v.f.add(Problem{Kind: Unreadable, Path: shard, Detail: err.Error()})
			}
			opts.Progress.unit()
			return nil
		})
	}
	g.Wait()
	opts.Progress.end()
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	rep.Duration = time.Since(began)
	rep.ForwardLinks, rep.ReverseLinks = v.forward.Load(), v.reverse.Load()
	rep.Blobs, rep.ReferrerEntries, rep.TagLinks = v.blobs.Load(), v.refs.Load(), v.tagLinks.Load()
	rep.ReclaimableComputed = computable
	if !computable {
		rep.ReclaimableNote = "not computed: some forward links could not be read, or too many lack reverse links; blobs are not called reclaimable on partial knowledge"
	}
	for _, k := range Kinds {
		v.f.mu.Lock()
		if n := v.f.counts[k]; n > 0 {
			rep.Counts[k] = n
		}
		rep.Findings = append(rep.Findings, v.f.items[k]...)
		v.f.mu.Unlock()
	}
	rep.ReclaimableBytes = v.f.bytes[Reclaimable]
	rep.ExitCode = rep.exitCode()
	return rep, nil
}

func (r *Report) exitCode() int {
	c := r.Counts
	switch {
	case c[MissingReverse]+c[MissingReferrer]+c[Corrupt]+c[BrokenForward] > 0:
		return ExitDataLoss
	case c[Unreadable] > 0:
		return ExitIncomplete
	case c[StaleReverse]+c[StaleReferrer] > 0:
		return ExitLeaks
	}
	return ExitClean
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

func (v *verifier) repo(ctx context.Context, repo string) {
	isForward := func(p string) bool { _, ok := parseLink(repo, p); return ok }
	for _, part := range []struct{ base, kind string }{
		{layersRoot(repo), layersDir},
		{revisionsRoot(repo), manifestsDir},
	} {
		g := new(errgroup.Group)
		g.SetLimit(linkConcurrency)
		err := walkLinks(ctx, v.d, part.base, isForward, func(e linkEntry) error {
			d, _ := parseLink(repo, e.Path)
			v.forward.Add(1)
			v.opts.Progress.link()
			if e.Bad != "" {
				// Distribution cannot read it; whatever it was meant to
				// link is never called reclaimable.
				v.keep(d)
				v.f.add(Problem{Kind: Corrupt, Path: e.Path, Repo: repo, Digest: d, Detail: e.Bad})
				return ctx.Err()
			}
			g.Go(func() error {
				v.forwardLink(ctx, repo, part.kind, d, e.Path)
				return nil
			})
			return ctx.Err()
		})
		g.Wait()
		if err != nil && ctx.Err() == nil {
			v.unreadable(Problem{Kind: Unreadable, Path: part.base, Repo: repo, Detail: err.Error()})
		}
	}
	base := referrersRoot(repo)
	isReferrer := func(p string) bool { _, _, ok := parseReferrerLink(repo, p); return ok }
	err := walkLinks(ctx, v.d, base, isReferrer, func(e linkEntry) error {
		subject, referrer, _ := parseReferrerLink(repo, e.Path)
		v.refs.Add(1)
		if e.Bad != "" {
			v.f.add(Problem{Kind: Corrupt, Path: e.Path, Repo: repo, Digest: referrer, Detail: e.Bad})
			return ctx.Err()
		}
		v.referrerEntry(ctx, repo, subject, referrer, e.Path)
		return ctx.Err()
	})
	if err != nil && ctx.Err() == nil {
		v.f.add(Problem{Kind: Unreadable, Path: base, Repo: repo, Detail: err.Error()})
	}
	v.tags(ctx, repo)
}

// tags checks repo's tag links: each current link and tag history entry
// must be a file holding a digest (the history entry: the one its path
// names). They are not part of the link database, but GC roots its marking
// in them, so a damaged one is reported with the rest.
func (v *verifier) tags(ctx context.Context, repo string) {
	base := tagsRoot(repo)
	isTag := func(p string) bool {
		c := layout.Classify(p)
		return (c.Kind == layout.KindTagCurrent || c.Kind == layout.KindTagIndex) && c.Repo == repo
	}
	err := walkLinks(ctx, v.d, base, isTag, func(e linkEntry) error {
		v.tagLinks.Add(1)
		c := layout.Classify(e.Path)
		if e.Bad != "" {
			v.f.add(Problem{Kind: Corrupt, Path: e.Path, Repo: repo, Digest: c.Digest, Detail: e.Bad})
			return ctx.Err()
		}
		b, err := v.d.GetContent(ctx, e.Path)
		switch {
		case layout.IsNotFound(err): // untagged while we walk
		case err != nil:
			v.f.add(Problem{Kind: Unreadable, Path: e.Path, Repo: repo, Digest: c.Digest, Detail: err.Error()})
		case c.Kind == layout.KindTagIndex && !WellFormedLink(b, c.Digest):
			v.f.add(Problem{Kind: Corrupt, Path: e.Path, Repo: repo, Digest: c.Digest, Detail: fmt.Sprintf("content %q", truncate(b))})
		case c.Kind == layout.KindTagCurrent:
			if _, err := digest.Parse(string(b)); err != nil {
				v.f.add(Problem{Kind: Corrupt, Path: e.Path, Repo: repo, Detail: fmt.Sprintf("content %q: %v", truncate(b), err)})
			}
		}
		return ctx.Err()
	})
	if err != nil && ctx.Err() == nil {
		v.f.add(Problem{Kind: Unreadable, Path: base, Repo: repo, Detail: err.Error()})
	}
}

func (v *verifier) forwardLink(ctx context.Context, repo, kind string, d digest.Digest, linkPath string) {
	b, err := v.d.GetContent(ctx, linkPath)
	if layout.IsNotFound(err) {
		return // deleted while we walk
	}
	if err != nil {
		v.keep(d)
		v.unreadable(Problem{Kind: Unreadable, Path: linkPath, Repo: repo, Digest: d, Detail: err.Error()})
		return
	}
	if !WellFormedLink(b, d) {
		detail := fmt.Sprintf("content %q, want %s", truncate(b), d)
		if content, err := digest.Parse(string(b)); err == nil && content != d {
			detail = fmt.Sprintf("content names %s", content)
			v.keep(content) // upstream resolves the link by its content
		}
		v.f.add(Problem{Kind: Corrupt, Path: linkPath, Repo: repo, Digest: d, Detail: detail})
	}
	rp := reverseLinkPath(d, repo, kind)
	rfi, err := v.d.Stat(ctx, rp)
	switch {
	case err == nil:
		if rfi.IsDir() {
			v.keep(d) // the blob walk reports it as corrupt
		}
	case layout.IsNotFound(err):
		v.keep(d)
		v.f.add(Problem{Kind: MissingReverse, Path: linkPath, Repo: repo, Digest: d})
	default:
		v.keep(d)
		v.f.add(Problem{Kind: Unreadable, Path: rp, Repo: repo, Digest: d, Detail: err.Error()})
	}
	data := layout.BlobDataPath(d)
	fi, err := v.d.Stat(ctx, data)
	switch {
	case err == nil:
	case layout.IsNotFound(err):
		v.f.add(Problem{Kind: BrokenForward, Path: linkPath, Repo: repo, Digest: d})
		return
	default:
		v.f.add(Problem{Kind: Unreadable, Path: data, Repo: repo, Digest: d, Detail: err.Error()})
		return
	}
	if fi.IsDir() {
		v.f.add(Problem{Kind: Corrupt, Path: data, Repo: repo, Digest: d, Detail: "blob data is a directory"})
		return
	}
	if kind != manifestsDir || fi.Size() > maxManifestSize {
		return
	}
	payload, err := v.d.GetContent(ctx, data)
	if err != nil {
		v.f.add(Problem{Kind: Unreadable, Path: data, Repo: repo, Digest: d, Detail: err.Error()})
		return
	}
	if d.Algorithm().FromBytes(payload) != d {
		// GC aborts on it (manifest_unreadable): say so before it does.
		v.f.add(Problem{Kind: Corrupt, Path: data, Repo: repo, Digest: d, Detail: fmt.Sprintf("manifest content (%d bytes) does not match its digest", len(payload))})
		return
	}
	subject, _, ok, err := referrers.Of(payload, d, "")
	if err != nil {
		v.f.add(Problem{Kind: Corrupt, Path: data, Repo: repo, Digest: d, Detail: err.Error()})
		return
	}
	if !ok {
		return
	}
	p := layout.ReferrerLinkPath(repo, subject, d)
	if _, err := v.d.Stat(ctx, p); layout.IsNotFound(err) {
		v.f.add(Problem{Kind: MissingReferrer, Path: p, Repo: repo, Digest: d, Detail: "subject " + subject.String()})
	} else if err != nil {
		v.f.add(Problem{Kind: Unreadable, Path: p, Repo: repo, Digest: d, Detail: err.Error()})
	}
}

func (v *verifier) referrerEntry(ctx context.Context, repo string, subject, referrer digest.Digest, p string) {
	b, err := v.d.GetContent(ctx, p)
	if layout.IsNotFound(err) {
		return
	}
	if err != nil {
		v.f.add(Problem{Kind: Unreadable, Path: p, Repo: repo, Digest: referrer, Detail: err.Error()})
		return
	}
	var desc v1.Descriptor
	if err := json.Unmarshal(b, &desc); err != nil || desc.Digest != referrer {
		v.f.add(Problem{Kind: Corrupt, Path: p, Repo: repo, Digest: referrer, Detail: fmt.Sprintf("not a descriptor of %s: %q", referrer, truncate(b))})
	}
	rev := layout.RevisionLinkPath(repo, referrer)
	if _, err := v.d.Stat(ctx, rev); layout.IsNotFound(err) {
		v.f.add(Problem{Kind: StaleReferrer, Path: p, Repo: repo, Digest: referrer, Detail: "subject " + subject.String()})
	} else if err != nil {
		v.f.add(Problem{Kind: Unreadable, Path: rev, Repo: repo, Digest: referrer, Detail: err.Error()})
	}
}

func (v *verifier) reverseLink(ctx context.Context, fi storagedriver.FileInfo, bp blobPath) {
	v.reverse.Add(1)
	v.opts.Progress.link()
	if fi.IsDir() {
		// GC counts it as a link (and keeps the blob); rebuild cannot
		// replace a directory while registries serve.
		v.f.add(Problem{Kind: Corrupt, Path: fi.Path(), Repo: bp.repo, Digest: bp.digest, Detail: "a directory, not a link file"})
		return
	}
	b, err := v.d.GetContent(ctx, fi.Path())
	if layout.IsNotFound(err) {
		return
	}
	if err != nil {
		v.f.add(Problem{Kind: Unreadable, Path: fi.Path(), Repo: bp.repo, Digest: bp.digest, Detail: err.Error()})
	} else if !WellFormedLink(b, bp.digest) {
		v.f.add(Problem{Kind: Corrupt, Path: fi.Path(), Repo: bp.repo, Digest: bp.digest, Detail: fmt.Sprintf("content %q", truncate(b))})
	}
	fwd := forwardLinkPath(bp.repo, bp.digest, bp.kind)
	if _, err := v.d.Stat(ctx, fwd); layout.IsNotFound(err) {
		v.f.add(Problem{Kind: StaleReverse, Path: fi.Path(), Repo: bp.repo, Digest: bp.digest})
	} else if err != nil {
		v.f.add(Problem{Kind: Unreadable, Path: fwd, Repo: bp.repo, Digest: bp.digest, Detail: err.Error()})
	}
}

func (v *verifier) blob(b *blobEntry, computable bool) {
	v.blobs.Add(1)
	if b.unknown {
		v.f.add(Problem{Kind: Unreadable, Path: b.dir, Digest: b.path.digest, Detail: b.detail})
		return // unknown, never unreferenced
	}
	if !b.hasData || b.reverse > 0 || !computable {
		return
	}
	v.mu.Lock()
	_, linked := v.linked[b.path.digest]
	v.mu.Unlock()
	if !linked {
		v.f.add(Problem{Kind: Reclaimable, Path: b.dir, Digest: b.path.digest, Size: b.dataSize})
	}
}

// WriteText writes the human summary of r.
func (r *Report) WriteText(w io.Writer) error {
	bw := &errWriter{w: w}
	fmt.Fprintf(bw, "link database verify: %d repositories, %d forward links, %d reverse links, %d blobs, %d referrers entries, %d tag links (%s)\n",
		r.Repositories, r.ForwardLinks, r.ReverseLinks, r.Blobs, r.ReferrerEntries, r.TagLinks, r.Duration.Round(time.Millisecond))
	if r.CompleteSince != nil {
		fmt.Fprintf(bw, "marker: complete since %s\n", r.CompleteSince.Format(time.RFC3339))
	} else {
		fmt.Fprintf(bw, "marker: absent (no rebuild has finished; GC will not delete shared blobs)\n")
	}
	fmt.Fprintln(bw)
	tw := tabwriter.NewWriter(bw, 0, 4, 2, ' ', 0)
	for _, k := range Kinds {
		n := r.Counts[k]
		extra := ""
		if k == Reclaimable {
			if !r.ReclaimableComputed {
				extra = " (not computed)"
			} else if n > 0 {
				extra = fmt.Sprintf(" (%d bytes)", r.ReclaimableBytes)
			}
		}
		fmt.Fprintf(tw, "  %s\t%d%s\t%s\n", k, n, extra, k.Message())
	}
	tw.Flush()
	if r.ReclaimableNote != "" {
		fmt.Fprintf(bw, "\nreclaimable: %s\n", r.ReclaimableNote)
	}
	const perKind = 20
	shown, perKindShown := false, map[Kind]int{}
	for _, p := range r.Findings {
		if p.Kind == Reclaimable || perKindShown[p.Kind] >= perKind {
			continue // reclaimable is the normal state, not a finding to act on
		}
		perKindShown[p.Kind]++
		if !shown {
			fmt.Fprintf(bw, "\nfindings (first %d of each kind; --json lists more):\n", perKind)
			shown = true
		}
		line := fmt.Sprintf("  %-16s %s", p.Kind, p.Path)
		if p.Detail != "" {
			line += "  (" + p.Detail + ")"
		}
		fmt.Fprintln(bw, line)
	}
	fmt.Fprintf(bw, "\nverdict: %s (exit %d)\n", verdict(r.ExitCode), r.ExitCode)
	return bw.err
}

func verdict(code int) string {
	switch code {
	case ExitClean:
		return "clean"
	case ExitLeaks:
		return "leaks only: run `registry linkdb rebuild` to remove them"
	case ExitDataLoss:
		return "DATA-LOSS RISK: do not run GC; run `registry linkdb rebuild`, then verify again"
	default:
		return "incomplete: some parts could not be read (see unreadable)"
	}
}

type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}
