package linkdb

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/storage/referrers"
)

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

// ErrBroken means the rebuild finished and, unless it was a dry run,
// marked the link database complete, but found forward links to blobs
// whose data is gone (BrokenForward): the data was lost before, GC is
// safe, and no rebuild restores it (BrokenForward.Remedy).
var ErrBroken = errors.New("linkdb: rebuild found links to data that is already gone (broken_forward)")

// RebuildOptions configure Rebuild. The zero value is a safe, serial,
// non-destructive rebuild that adds missing links and removes nothing.
type RebuildOptions struct {
	// Workers bounds how many repositories (then blob shards) are walked at
	// once. Default 4.
	Workers int
	// DryRun reports what would change and writes nothing, not even a
	// checkpoint or the marker. Its findings list what verify would: the
	// missing reverse links and referrers entries it would write too.
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
	// FilesystemRoot, when d is Distribution's filesystem driver, is its
	// root directory (the rootdirectory parameter). The rebuild then writes
	// the reverse links and referrers index entries it adds straight into
	// it, without the driver's fsyncs per file, and makes them durable in one syncfs(2) before each
	// checkpoint it saves and before the completeness marker (Linux; other
	// systems write through the driver). It checks that the root is d's by
	// writing a probe file and reading it back through d: ErrWrongRoot.
	// Empty: every link is written through the driver, durable one by one,
	// which on S3 costs nothing more (a PUT is durable when it returns;
	// the rate there is Workers).
	FilesystemRoot string
	// Progress, when set, reports progress.
	Progress *Progress
	// MaxFindings bounds how many findings of each kind are kept in the
	// result (counts are always exact). Default 100.
	MaxFindings int

	now       func() time.Time
	repoDone  func(repo string)  // test hook: after a repository is finished
	shardDone func(shard string) // test hook: after a blob shard is finished
	beforeDel func()             // test hook: between re-check and removal
	// test hooks: wrap the link writer; save a checkpoint after each unit
	wrapWriter func(linkWriter) linkWriter
	saveEach   bool
}

func (o *RebuildOptions) defaults() {
	if o.Workers <= 0 {
		o.Workers = 4
	}
	if o.MinAge == 0 {
		o.MinAge = 10 * time.Minute
	}
	if o.CheckpointEvery <= 0 {
		o.CheckpointEvery = 15 * time.Second
	}
	if o.MaxFindings <= 0 {
		o.MaxFindings = 100
	}
	if o.now == nil {
		o.now = time.Now
	}
	if o.DryRun {
		o.Checkpoint = nil    // dry-run writes nothing
		o.FilesystemRoot = "" // not even the root's probe file
	}
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
	Broken              int64          `json:"broken_forward"`    // links to data already gone (see ErrBroken)
	ReferrersAdded      int64          `json:"referrers_added"`
	ReverseLinks        int64          `json:"reverse_links_seen"`
	StaleRemoved        int64          `json:"stale_removed"`
	StaleKept           int64          `json:"stale_kept"` // young, fenced, no fence, or re-linked meanwhile
	StaleRestored       int64          `json:"stale_restored"`
	Complete            bool           `json:"complete"` // the marker was written
	Counts              map[Kind]int64 `json:"counts"`
	Problems            []Problem      `json:"problems"` // the first MaxFindings of each kind
	Duration            time.Duration  `json:"duration_ns"`
	RepositoriesPhase   time.Duration  `json:"repositories_phase_ns"` // phase 1: forward -> reverse
	BlobsPhase          time.Duration  `json:"blobs_phase_ns"`        // phase 2: stale reverse links
}

type rebuild struct {
	d         storagedriver.StorageDriver
	w         linkWriter // links' writer: r.w.barrier makes its links durable
	links     *ReverseLinks
	referrers *referrers.Index
	opts      RebuildOptions
	f         *findings
	res       RebuildResult
	began     time.Time

	forward, added, present, refAdded, reverse atomic.Int64
	rewritten, damaged, broken                 atomic.Int64
	removed, kept, restored                    atomic.Int64

	mu         sync.Mutex // guards doneRepos and doneShards
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
	opts.defaults()
	w, err := newLinkWriter(ctx, d, opts.FilesystemRoot)
	if err != nil {
		return nil, err
	}
	defer w.close()
	d = readsOf(w, d) // with the filesystem writer: its reads too (fsreads_linux.go)
	if opts.wrapWriter != nil {
		w = opts.wrapWriter(w)
	}
	r := &rebuild{d: d, w: w, links: &ReverseLinks{driver: d, writer: w}, referrers: referrers.New(writesThrough{d, w}), opts: opts, f: newFindings(opts.MaxFindings),
		doneRepos: map[string]bool{}, doneShards: map[string]bool{}, began: time.Now()}
	r.res.Started = opts.now().UTC()
	r.res.DryRun = opts.DryRun
	if err := r.resume(ctx); err != nil {
		return nil, err
	}
	incomplete, err := r.repositories(ctx)
	r.res.RepositoriesPhase = time.Since(r.began)
	if err != nil {
		r.saveCheckpoint(context.WithoutCancel(ctx))
		return r.result(), err
	}
	damaged := r.damaged.Load() > 0
	if !incomplete && !damaged && !opts.DryRun {
		// Every forward link that existed when the walk reached it has a
		// reverse link, and the middleware covers every write since Started.
		// The marker is durable when written: the links must be first.
		if err := r.w.barrier(ctx); err != nil {
			return r.result(), fmt.Errorf("make reverse links durable before the marker: %w", err)
		}
		if err := MarkLinkDBComplete(ctx, d, r.res.Started); err != nil {
			return r.result(), fmt.Errorf("write link database marker: %w", err)
		}
		r.res.Complete = true
	}
	blobsBegan := time.Now()
	shardsFailed, err := r.shards(ctx)
	r.res.BlobsPhase = time.Since(blobsBegan)
	if err != nil {
		r.saveCheckpoint(context.WithoutCancel(ctx))
		return r.result(), err
	}
	if err := r.finishCheckpoint(ctx, incomplete || shardsFailed); err != nil {
		return r.result(), err
	}
	switch {
	case damaged && r.f.count(Unreadable) > 0:
		return r.result(), fmt.Errorf("%w; also %w", ErrDamaged, ErrIncomplete)
	case damaged:
		return r.result(), ErrDamaged
	case incomplete:
		return r.result(), ErrIncomplete
	case r.broken.Load() > 0:
		return r.result(), ErrBroken
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
	res.Broken = r.broken.Load()
	res.ReferrersAdded = r.refAdded.Load()
	res.ReverseLinks = r.reverse.Load()
	res.StaleRemoved = r.removed.Load()
	res.StaleKept = r.kept.Load()
	res.StaleRestored = r.restored.Load()
	res.Counts, res.Problems = r.f.report()
	return &res
}

// damage records p as damage the rebuild cannot repair (see ErrDamaged).
func (r *rebuild) damage(p Problem) {
	r.damaged.Add(1)
	r.f.add(p)
}

// problem records p: unreadable, a broken link, or else damage.
func (r *rebuild) problem(p Problem) {
	switch p.Kind {
	case Unreadable:
		r.f.add(p)
	case BrokenForward:
		r.broken.Add(1)
		r.f.add(p)
	default:
		r.damage(p)
	}
}

// phase runs work on every unit (repository or blob shard) that done does
// not hold yet, Workers at once, saving the checkpoint as it goes. A unit
// work finishes (true) goes into done, then to finished. failed is true when
// work failed on some unit.
func (r *rebuild) phase(ctx context.Context, name string, units []string, done map[string]bool, finished func(string), work func(unit string) bool) (skipped int, failed bool, err error) {
	var todo []string
	for _, u := range units {
		if done[u] {
			skipped++
		} else {
			todo = append(todo, u)
		}
	}
	r.opts.Progress.begin(name, len(units), skipped)
	defer r.opts.Progress.end()
	stop := r.checkpointer(ctx)
	defer stop()
	var anyFailed atomic.Bool
	err = each(ctx, r.opts.Workers, todo, func(u string) {
		if !work(u) {
			anyFailed.Store(true)
			return
		}
		r.mu.Lock()
		done[u] = true
		r.mu.Unlock()
		r.opts.Progress.unit()
		if finished != nil {
			finished(u)
		}
		if r.opts.saveEach {
			r.saveCheckpoint(ctx)
		}
	})
	return skipped, anyFailed.Load(), err
}
