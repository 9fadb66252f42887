package linkdb

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/referrers"
	"golang.org/x/sync/errgroup"
)

// linkConcurrency is how many links of one repository are checked at once,
// on top of Workers repositories: object stores are latency-bound.
const linkConcurrency = 8

// ErrIncomplete means part of the registry could not be read, so the
// rebuild could not establish that every forward link has its reverse link.
// It did not write the marker; the checkpoint keeps the finished parts, so
// running it again retries only what failed.
var ErrIncomplete = errors.New("linkdb: rebuild incomplete: some repositories could not be read")

// ErrDamaged means the rebuild found damage it cannot repair: something at
// a forward or reverse link path that is not a link file (a directory, a
// dangling entry), a forward link whose content is not its digest, or a
// manifest that is missing, truncated or unparsable. What it could repair
// it did (a reverse link with bad content is rewritten). It did not write
// the marker, and the repositories concerned are not checkpointed as
// finished: repair or delete what it lists and run it again.
var ErrDamaged = errors.New("linkdb: rebuild found damage it cannot repair")

// Fencer takes the GC fence on one repository's link to a blob, the same
// fence GC takes before it unlinks (tracker.Tracker.Fence). While it is
// held, the middleware refuses to (re-)create that link, so a stale reverse
// link can be removed without racing a push. An error (recently accessed,
// already fenced, Redis down) means: do not remove.
type Fencer interface {
	FenceLink(ctx context.Context, blob digest.Digest, repo, kind string) (release func(), err error)
}

// RebuildOptions configure Rebuild. The zero value is a safe, serial,
// non-destructive rebuild that adds missing links and removes nothing.
type RebuildOptions struct {
	// Workers bounds how many repositories (then blob shards) are walked at
	// once. Default 4.
	Workers int
	// DryRun reports what would change and writes nothing, not even a
	// checkpoint or the marker.
	DryRun bool
	// Fencer, when set, lets rebuild remove stale reverse links and stale
	// referrers entries while registries serve. Without it they are only
	// reported, unless Offline.
	Fencer Fencer
	// Review, when set, is told each blob whose stale reverse link the
	// rebuild removed: it may have lost its last link, so the reclaimer
	// should look at it (the middleware queues blobs whose links it removes;
	// a rebuild removes links behind its back).
	Review func(ctx context.Context, blob digest.Digest)
	// Offline asserts that no registry serves this storage during the
	// rebuild, so stale entries may be removed without a fence.
	Offline bool
	// MinAge leaves stale entries younger than this alone: a reverse link
	// written a moment ago is usually a push between its reverse and its
	// forward write. Zero means 10 minutes; negative turns the guard off.
	MinAge time.Duration
	// Checkpoint, when set, records finished repositories and shards, and a
	// new run resumes from it. Restart discards it first.
	Checkpoint      CheckpointStore
	CheckpointEvery time.Duration // default 15s
	Restart         bool
	// Progress, when set, reports progress.
	Progress *Progress
	// MaxFindings bounds how many findings of each kind are kept in the
	// result (counts are always exact). Default 100.
	MaxFindings int

	now       func() time.Time
	repoDone  func(repo string)  // test hook: after a repository is finished
	shardDone func(shard string) // test hook: after a blob shard is finished
	beforeDel func()             // test hook: between re-check and removal
}

// RebuildResult is what a rebuild did. Counts under dry-run are what it
// would have done.
type RebuildResult struct {
	Started             time.Time      `json:"started"` // the first run's start when resumed
	Resumed             bool           `json:"resumed"`
	DryRun              bool           `json:"dry_run"`
	Repositories        int            `json:"repositories"`
	RepositoriesSkipped int            `json:"repositories_skipped"` // finished by an earlier run
	Shards              int            `json:"shards"`
	ShardsSkipped       int            `json:"shards_skipped"`
	ForwardLinks        int64          `json:"forward_links"`
	ReverseAdded        int64          `json:"reverse_added"`
	ReversePresent      int64          `json:"reverse_present"`
	ReverseRewritten    int64          `json:"reverse_rewritten"` // bad content, rewritten in place
	Damaged             int64          `json:"damaged"`           // damage it could not repair (see ErrDamaged)
	ReferrersAdded      int64          `json:"referrers_added"`
	ReverseLinks        int64          `json:"reverse_links_seen"`
	StaleRemoved        int64          `json:"stale_removed"`
	StaleKept           int64          `json:"stale_kept"` // young, fenced, no fence, or re-linked meanwhile
	StaleRestored       int64          `json:"stale_restored"`
	Complete            bool           `json:"complete"` // the marker was written
	Counts              map[Kind]int64 `json:"counts"`
	Problems            []Problem      `json:"problems"` // the first MaxFindings of each kind
	Duration            time.Duration  `json:"duration_ns"`
}

type rebuild struct {
	d         storagedriver.StorageDriver
	links     *ReverseLinks
	referrers *referrers.Index
	opts      RebuildOptions
	f         *findings
	res       RebuildResult
	began     time.Time

	forward, added, present, refAdded, reverse atomic.Int64
	rewritten, damaged                         atomic.Int64
	removed, kept, restored                    atomic.Int64

	mu         sync.Mutex
	doneRepos  map[string]bool
	doneShards map[string]bool
}

// Rebuild walks every repository's layer and manifest revision links and
// writes the reverse links and referrers index entries that are missing,
// then walks the blob store and removes reverse links whose forward link is
// gone. When every repository was read it records "link database complete
// since <start>" in the storage. It is idempotent, resumable from
// opts.Checkpoint, and safe while registries with the middleware serve the
// same storage (see docs/operations.md).
//
// d must be the raw driver (no Reclaim middleware): rebuild writes reverse
// links itself and must not count its reads as accesses.
func Rebuild(ctx context.Context, d storagedriver.StorageDriver, opts RebuildOptions) (*RebuildResult, error) {
	if opts.Workers <= 0 {
		opts.Workers = 4
	}
	if opts.MinAge == 0 {
		opts.MinAge = 10 * time.Minute
	}
	if opts.CheckpointEvery <= 0 {
		opts.CheckpointEvery = 15 * time.Second
	}
	if opts.MaxFindings <= 0 {
		opts.MaxFindings = 100
	}
	if opts.now == nil {
		opts.now = time.Now
	}
	if opts.DryRun {
		opts.Checkpoint = nil // dry-run writes nothing
	}
	r := &rebuild{d: d, links: NewReverseLinks(d), referrers: referrers.New(d), opts: opts, f: newFindings(opts.MaxFindings),
		doneRepos: map[string]bool{}, doneShards: map[string]bool{}}
	r.res.Started = opts.now().UTC()
	r.res.DryRun = opts.DryRun
	r.began = time.Now()

	if cp := opts.Checkpoint; cp != nil {
		if opts.Restart {
			if err := cp.Clear(ctx); err != nil {
				return nil, fmt.Errorf("clear checkpoint: %w", err)
			}
		}
		c, err := cp.Load(ctx)
		if err != nil {
			return nil, err
		}
		if c != nil {
			// Keep the first run's start: repositories it finished were
			// covered from then on by the middleware.
			r.res.Started, r.res.Resumed = c.Started, true
			for _, s := range c.Repositories {
				r.doneRepos[s] = true
			}
			for _, s := range c.Shards {
				r.doneShards[s] = true
			}
		}
	}

	incomplete, err := r.repositories(ctx)
	if err != nil {
		r.saveCheckpoint(context.WithoutCancel(ctx))
		return r.result(), err
	}
	damaged := r.damaged.Load() > 0
	if !incomplete && !damaged && !opts.DryRun {
		// Every forward link that existed when the walk reached it has a
		// reverse link, and the middleware covers every write since Started.
		if err := MarkLinkDBComplete(ctx, d, r.res.Started); err != nil {
			return r.result(), fmt.Errorf("write link database marker: %w", err)
		}
		r.res.Complete = true
	}
	shardsFailed, err := r.shards(ctx)
	if err != nil {
		r.saveCheckpoint(context.WithoutCancel(ctx))
		return r.result(), err
	}
	if incomplete || shardsFailed {
		r.saveCheckpoint(ctx)
	} else if cp := opts.Checkpoint; cp != nil {
		if err := cp.Clear(ctx); err != nil {
			return r.result(), fmt.Errorf("clear checkpoint: %w", err)
		}
	}
	switch {
	case damaged && r.f.count(Unreadable) > 0:
		return r.result(), fmt.Errorf("%w; also %w", ErrDamaged, ErrIncomplete)
	case damaged:
		return r.result(), ErrDamaged
	case incomplete:
		return r.result(), ErrIncomplete
	}
	return r.result(), nil
}

func (r *rebuild) result() *RebuildResult {
	res := r.res
	res.Duration = time.Since(r.began)
	res.ForwardLinks = r.forward.Load()
	res.ReverseAdded = r.added.Load()
	res.ReversePresent = r.present.Load()
	res.ReverseRewritten = r.rewritten.Load()
	res.Damaged = r.damaged.Load()
	res.ReferrersAdded = r.refAdded.Load()
	res.ReverseLinks = r.reverse.Load()
	res.StaleRemoved = r.removed.Load()
	res.StaleKept = r.kept.Load()
	res.StaleRestored = r.restored.Load()
	res.Counts = map[Kind]int64{}
	for _, k := range Kinds {
		if n := r.f.count(k); n > 0 {
			res.Counts[k] = n
		}
		res.Problems = append(res.Problems, r.f.items[k]...)
	}
	return &res
}

func (r *rebuild) saveCheckpoint(ctx context.Context) {
	cp := r.opts.Checkpoint
	if cp == nil {
		return
	}
	r.mu.Lock()
	c := &Checkpoint{Version: checkpointVersion, Started: r.res.Started}
	for s := range r.doneRepos {
		c.Repositories = append(c.Repositories, s)
	}
	for s := range r.doneShards {
		c.Shards = append(c.Shards, s)
	}
	r.mu.Unlock()
	sort.Strings(c.Repositories)
	sort.Strings(c.Shards)
	// best effort: a failed save costs redoing work, never correctness
	_ = cp.Save(ctx, c)
}

// periodically saves the checkpoint until stop is closed.
func (r *rebuild) checkpointer(ctx context.Context) (stop func()) {
	if r.opts.Checkpoint == nil {
		return func() {}
	}
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(r.opts.CheckpointEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				r.saveCheckpoint(ctx)
			}
		}
	}()
	return func() { close(done); <-exited }
}

// repositories is phase 1: forward -> reverse, and the referrers index.
func (r *rebuild) repositories(ctx context.Context) (incomplete bool, err error) {
	repos, unreadable, err := repositories(ctx, r.d)
	if err != nil {
		return true, err
	}
	for _, p := range unreadable {
		r.f.add(p)
		incomplete = true
	}
	r.res.Repositories = len(repos)
	// Decide what to skip before any worker marks anything done.
	var todo []string
	for _, s := range repos {
		if r.doneRepos[s] {
			r.res.RepositoriesSkipped++
		} else {
			todo = append(todo, s)
		}
	}
	r.opts.Progress.begin("repositories", len(repos), r.res.RepositoriesSkipped)
	defer r.opts.Progress.end()
	stop := r.checkpointer(ctx)
	defer stop()

	var failed atomic.Bool
	g := new(errgroup.Group)
	g.SetLimit(r.opts.Workers)
	for _, repo := range todo {
		if ctx.Err() != nil {
			break
		}
		g.Go(func() error {
			ok, err := r.repo(ctx, repo)
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				r.f.add(Problem{Kind: Unreadable, Path: repoDir(repo), Repo: repo, Detail: err.Error()})
				ok = false
			}
			if !ok {
				failed.Store(true)
				return nil
			}
			r.mu.Lock()
			r.doneRepos[repo] = true
			r.mu.Unlock()
			r.opts.Progress.unit()
			if h := r.opts.repoDone; h != nil {
				h(repo)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return true, err
	}
	if err := ctx.Err(); err != nil {
		return true, err
	}
	return incomplete || failed.Load(), nil
}

// repo rebuilds one repository. ok is false when some link could not be
// read or is damaged, so the repository is not known to be covered.
func (r *rebuild) repo(ctx context.Context, repo string) (ok bool, err error) {
	var failed atomic.Bool
	isForward := func(p string) bool { _, ok := parseLink(repo, p); return ok }
	for _, part := range []struct{ base, kind string }{
		{layersRoot(repo), layersDir},
		{revisionsRoot(repo), manifestsDir},
	} {
		// The walk streams; each link costs a few round trips, so a few run
		// at once. g.Go blocks at the limit, which holds the walk back.
		g := new(errgroup.Group)
		g.SetLimit(linkConcurrency)
		err := walkLinks(ctx, r.d, part.base, isForward, func(e linkEntry) error {
			d, _ := parseLink(repo, e.Path)
			r.forward.Add(1)
			r.opts.Progress.link()
			if e.Bad != "" {
				r.damage(Problem{Kind: Corrupt, Path: e.Path, Repo: repo, Digest: d, Detail: e.Bad})
				failed.Store(true)
				return ctx.Err()
			}
			g.Go(func() error {
				if !r.forwardLink(ctx, repo, part.kind, d, e.Path) {
					failed.Store(true)
				}
				return nil
			})
			return ctx.Err()
		})
		g.Wait()
		if err != nil {
			return false, fmt.Errorf("walk %s: %w", part.base, err)
		}
	}
	ok = !failed.Load()
	isReferrer := func(p string) bool { _, _, ok := parseReferrerLink(repo, p); return ok }
	err = walkLinks(ctx, r.d, referrersRoot(repo), isReferrer, func(e linkEntry) error {
		subject, referrer, _ := parseReferrerLink(repo, e.Path)
		if e.Bad != "" {
			// Not part of the link database: reported, not repaired.
			r.f.add(Problem{Kind: Corrupt, Path: e.Path, Repo: repo, Digest: referrer, Detail: e.Bad})
			return ctx.Err()
		}
		rev := layout.RevisionLinkPath(repo, referrer)
		_, err := r.d.Stat(ctx, rev)
		switch {
		case err == nil:
		case layout.IsNotFound(err):
			r.removeStale(ctx, stale{kind: StaleReferrer, blob: referrer, repo: repo, linkKind: manifestsDir,
				forward: rev, victim: e.Path, modTime: e.Info.ModTime(),
				remove: func(ctx context.Context) error { return r.referrers.Remove(ctx, repo, subject, referrer) }})
		default:
			r.f.add(Problem{Kind: Unreadable, Path: rev, Repo: repo, Digest: referrer, Detail: err.Error()})
		}
		return ctx.Err()
	})
	if err != nil {
		// The referrers index is not part of the reverse-link database's
		// completeness; report and go on.
		r.f.add(Problem{Kind: Unreadable, Path: referrersRoot(repo), Repo: repo, Detail: err.Error()})
	}
	return ok, ctx.Err()
}

// damage records p as damage the rebuild cannot repair (see ErrDamaged).
func (r *rebuild) damage(p Problem) {
	r.damaged.Add(1)
	r.f.add(p)
}

// forwardLink makes sure the forward link at linkPath, which names blob d,
// has a well-formed reverse link, and for a manifest, its referrers entry.
// It returns false when the link could not be read, the reverse link not
// written, or either (or the manifest) is damaged.
func (r *rebuild) forwardLink(ctx context.Context, repo, kind string, d digest.Digest, linkPath string) bool {
	b, err := r.d.GetContent(ctx, linkPath)
	if layout.IsNotFound(err) {
		return true // deleted during the walk: the middleware removed (or removes) its reverse link
	}
	if err != nil {
		r.f.add(Problem{Kind: Unreadable, Path: linkPath, Repo: repo, Digest: d, Detail: err.Error()})
		return false
	}
	ok := true
	wellFormed := WellFormedLink(b, d)
	if !wellFormed {
		// Fail safe: the path still names a blob; keep it linked below.
		// The link itself is Distribution's: not ours to rewrite.
		detail := fmt.Sprintf("content %q, want %s", truncate(b), d)
		if content, err := digest.Parse(string(b)); err == nil {
			detail = fmt.Sprintf("content names %s", content)
		}
		r.damage(Problem{Kind: Corrupt, Path: linkPath, Repo: repo, Digest: d, Detail: detail})
		ok = false
	}
	l := layout.RepoLink{Repo: repo, Kind: layout.LinkKind(kind)}
	rp := reverseLinkPath(d, repo, kind)
	has, err := r.links.Has(ctx, d, l)
	switch {
	case errors.Is(err, ErrMalformedLink):
		if fi, serr := r.d.Stat(ctx, rp); serr == nil && fi.IsDir() {
			// A directory cannot be replaced in one step, and removing
			// it first would leave the forward link without a reverse
			// link while registries serve: left to the operator.
			r.damage(Problem{Kind: Corrupt, Path: rp, Repo: repo, Digest: d, Detail: "a directory, not a link file: remove it, then run rebuild again"})
			return false
		}
		// Bad content: rewrite it. PutContent replaces the file in one
		// step, so the link never reads as absent meanwhile.
		if !r.opts.DryRun {
			if err := r.links.Put(ctx, d, l); err != nil {
				r.f.add(Problem{Kind: Unreadable, Path: rp, Repo: repo, Digest: d, Detail: "rewrite: " + err.Error()})
				return false
			}
		}
		r.rewritten.Add(1)
	case err != nil:
		r.f.add(Problem{Kind: Unreadable, Path: rp, Repo: repo, Digest: d, Detail: err.Error()})
		return false
	case has:
		r.present.Add(1)
	default:
		if !r.opts.DryRun {
			if err := r.links.Put(ctx, d, l); err != nil {
				r.f.add(Problem{Kind: Unreadable, Path: rp, Repo: repo, Digest: d, Detail: err.Error()})
				return false
			}
		}
		r.added.Add(1)
	}
	if kind == manifestsDir && wellFormed {
		ok = r.referrer(ctx, repo, d) && ok
	}
	return ok
}

// referrer adds manifest m of repo to the referrers index if it has a
// subject and is not listed yet. It returns false when the manifest is
// missing, damaged or unreadable: GC could not read it either (it aborts
// that repository), so a rebuild that calls itself finished must not
// either.
func (r *rebuild) referrer(ctx context.Context, repo string, m digest.Digest) bool {
	data := layout.BlobDataPath(m)
	fi, err := r.d.Stat(ctx, data)
	if layout.IsNotFound(err) {
		r.damage(Problem{Kind: BrokenForward, Path: layout.RevisionLinkPath(repo, m), Repo: repo, Digest: m})
		return false
	}
	if err != nil {
		r.f.add(Problem{Kind: Unreadable, Path: data, Repo: repo, Digest: m, Detail: err.Error()})
		return false
	}
	if fi.IsDir() {
		r.damage(Problem{Kind: Corrupt, Path: data, Repo: repo, Digest: m, Detail: "blob data is a directory"})
		return false
	}
	if fi.Size() > maxManifestSize {
		return true // not a manifest Distribution would have accepted
	}
	payload, err := r.d.GetContent(ctx, data)
	if err != nil {
		r.f.add(Problem{Kind: Unreadable, Path: data, Repo: repo, Digest: m, Detail: err.Error()})
		return false
	}
	if m.Algorithm().FromBytes(payload) != m {
		r.damage(Problem{Kind: Corrupt, Path: data, Repo: repo, Digest: m, Detail: fmt.Sprintf("manifest content (%d bytes) does not match its digest", len(payload))})
		return false
	}
	subject, desc, ok, err := referrers.Of(payload, m, "")
	if err != nil {
		r.damage(Problem{Kind: Corrupt, Path: data, Repo: repo, Digest: m, Detail: err.Error()})
		return false
	}
	if !ok {
		return true
	}
	p := layout.ReferrerLinkPath(repo, subject, m)
	if _, err := r.d.Stat(ctx, p); err == nil {
		return true
	} else if !layout.IsNotFound(err) {
		r.f.add(Problem{Kind: Unreadable, Path: p, Repo: repo, Digest: m, Detail: err.Error()})
		return false
	}
	if !r.opts.DryRun {
		if err := r.referrers.Add(ctx, repo, subject, desc); err != nil {
			r.f.add(Problem{Kind: Unreadable, Path: p, Repo: repo, Digest: m, Detail: "write: " + err.Error()})
			return false
		}
	}
	r.refAdded.Add(1)
	return true
}

// shards is phase 2: remove reverse links whose forward link is gone.
func (r *rebuild) shards(ctx context.Context) (failed bool, err error) {
	all, err := shards(ctx, r.d)
	if err != nil {
		if ctx.Err() != nil {
			return true, ctx.Err()
		}
		r.f.add(Problem{Kind: Unreadable, Path: blobsDir, Detail: err.Error()})
		return true, nil
	}
	r.res.Shards = len(all)
	var todo []string
	for _, s := range all {
		if r.doneShards[s] {
			r.res.ShardsSkipped++
		} else {
			todo = append(todo, s)
		}
	}
	r.opts.Progress.begin("blobs", len(all), r.res.ShardsSkipped)
	defer r.opts.Progress.end()
	stop := r.checkpointer(ctx)
	defer stop()

	var anyFailed atomic.Bool
	g := new(errgroup.Group)
	g.SetLimit(r.opts.Workers)
	for _, shard := range todo {
		if ctx.Err() != nil {
			break
		}
		g.Go(func() error {
			err := walkShard(ctx, r.d, shard, blobVisitor{
				onReverse: func(_ *blobEntry, fi storagedriver.FileInfo, bp blobPath) {
					r.reverse.Add(1)
					r.opts.Progress.link()
					r.reverseLink(ctx, fi, bp)
				},
				onBlob: func(b *blobEntry) {
					if b.unknown {
						r.f.add(Problem{Kind: Unreadable, Path: b.dir, Digest: b.path.digest, Detail: b.detail})
					}
				},
			})
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				r.f.add(Problem{Kind: Unreadable, Path: shard, Detail: err.Error()})
				anyFailed.Store(true)
				return nil
			}
			r.mu.Lock()
			r.doneShards[shard] = true
			r.mu.Unlock()
			r.opts.Progress.unit()
			if h := r.opts.shardDone; h != nil {
				h(shard)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return true, err
	}
	return anyFailed.Load(), ctx.Err()
}

func (r *rebuild) reverseLink(ctx context.Context, fi storagedriver.FileInfo, bp blobPath) {
	fwd := forwardLinkPath(bp.repo, bp.digest, bp.kind)
	_, err := r.d.Stat(ctx, fwd)
	switch {
	case err == nil:
	case layout.IsNotFound(err):
		r.removeStale(ctx, stale{kind: StaleReverse, blob: bp.digest, repo: bp.repo, linkKind: bp.kind,
			forward: fwd, victim: fi.Path(), modTime: fi.ModTime()})
	default:
		r.f.add(Problem{Kind: Unreadable, Path: fwd, Repo: bp.repo, Digest: bp.digest, Detail: err.Error()})
	}
}

// stale is an entry (reverse link or referrers entry) whose forward link
// was missing when the walk looked.
type stale struct {
	kind     Kind
	blob     digest.Digest
	repo     string
	linkKind string
	forward  string // the link whose absence makes victim stale
	victim   string
	modTime  time.Time
	remove   func(context.Context) error // default: delete victim
}

// removeStale removes s.victim if its forward link is still absent. The
// middleware writes the reverse link before the forward link, so removing a
// reverse link races a push that re-links the blob: the push may write the
// reverse link after our re-check and before our delete, then the forward
// link, leaving a forward link without reverse link. The fence closes that:
// while rebuild holds the link's fence, the middleware refuses the write, and
// the fence is refused if the link was touched within the protection window.
// Without a fence only an offline rebuild removes anything.
func (r *rebuild) removeStale(ctx context.Context, s stale) {
	r.f.add(Problem{Kind: s.kind, Path: s.victim, Repo: s.repo, Digest: s.blob})
	if r.opts.MinAge > 0 && r.opts.now().Sub(s.modTime) < r.opts.MinAge {
		r.kept.Add(1) // likely a push between its reverse and forward write
		return
	}
	if r.opts.DryRun {
		r.removed.Add(1)
		return
	}
	switch {
	case r.opts.Fencer != nil:
		release, err := r.opts.Fencer.FenceLink(ctx, s.blob, s.repo, s.linkKind)
		if err != nil {
			r.kept.Add(1) // recently accessed, fenced by GC, or Redis down: keep
			return
		}
		defer release()
	case r.opts.Offline:
	default:
		r.kept.Add(1)
		return
	}
	var content []byte
	if r.opts.Fencer == nil {
		// offline: keep the content so a forward link that appears anyway
		// (the operator was wrong about "offline") gets it back.
		b, err := r.d.GetContent(ctx, s.victim)
		if err != nil {
			r.kept.Add(1)
			return
		}
		content = b
	}
	// Check again right before destroying.
	if _, err := r.d.Stat(ctx, s.forward); err == nil || !layout.IsNotFound(err) {
		r.kept.Add(1)
		return
	}
	if h := r.opts.beforeDel; h != nil {
		h()
	}
	remove := s.remove
	if remove == nil {
		remove = func(ctx context.Context) error { return r.d.Delete(ctx, s.victim) }
	}
	if err := remove(ctx); err != nil && !layout.IsNotFound(err) {
		r.f.add(Problem{Kind: Unreadable, Path: s.victim, Repo: s.repo, Digest: s.blob, Detail: "delete: " + err.Error()})
		r.kept.Add(1)
		return
	}
	r.removed.Add(1)
	if s.kind == StaleReverse && r.opts.Review != nil {
		r.opts.Review(ctx, s.blob)
	}
	if content != nil {
		if _, err := r.d.Stat(ctx, s.forward); err == nil || !layout.IsNotFound(err) {
			if err := r.d.PutContent(ctx, s.victim, content); err == nil {
				r.restored.Add(1)
			} else {
				r.f.add(Problem{Kind: MissingReverse, Path: s.victim, Repo: s.repo, Digest: s.blob, Detail: "restore: " + err.Error()})
			}
		}
	}
}

func truncate(b []byte) string {
	if len(b) > 80 {
		return string(b[:80]) + "..."
	}
	return string(b)
}
