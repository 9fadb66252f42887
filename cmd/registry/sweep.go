package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/distribution/distribution/v3/configuration"
	distregistry "github.com/distribution/distribution/v3/registry"
	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/opencontainers/go-digest"
	"github.com/spf13/cobra"

	"github.com/reclaim-registry/reclaim/gc"
	"github.com/reclaim-registry/reclaim/registry"
	"github.com/reclaim-registry/reclaim/storage"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/linkdb"
)

// `registry gc sweep <config>` is the slow path: a walk of the whole blob
// store that finds blobs no repository links and that are not in the review
// queue (Redis lost its data, an enqueue failed, a rebuild removed stale
// reverse links). Normally the middleware queues every such blob itself and
// the background reclaimer frees it; run this only after such an incident.
//
//	registry gc sweep config.yml             # dry run: count and list, change nothing
//	registry gc sweep --enqueue config.yml   # queue them for the reclaimers (due now)
//	registry gc sweep --apply config.yml     # delete now those that qualify, same step as the reclaimer

// Exit codes of `registry gc sweep`.
const (
	sweepExitOK      = 0
	sweepExitFailed  = 1 // could not run, or interrupted
	sweepExitPartial = 5 // finished, some blobs could not be checked, queued or deleted
)

// sweepExit is os.Exit, replaced by tests.
var sweepExit = os.Exit

func init() {
	for _, c := range distregistry.RootCmd.Commands() {
		if c.Name() == "gc" {
			c.AddCommand(newGCSweepCommand())
			return
		}
	}
	// gc.go not linked in: attach a parent of our own.
	parent := &cobra.Command{Use: "gc", Short: "Garbage collection"}
	parent.AddCommand(newGCSweepCommand())
	distregistry.RootCmd.AddCommand(parent)
}

type sweepOptions struct {
	enqueue, apply, verbose bool
}

func newGCSweepCommand() *cobra.Command {
	var o sweepOptions
	cmd := &cobra.Command{
		Use:   "sweep <config>",
		Short: "Slow path: walk the blob store for unreferenced blobs missing from the review queue",
		Long: `Walks every blob of the storage in <config> (O(blobs), the rare fallback
after Redis lost its data) and finds blobs that no repository links and that
are not queued for review. By default it only reports them. --enqueue queues
them for the background reclaimers; --apply deletes now those that qualify
(no reverse link, not accessed within the window, fence taken, re-checked),
through the same step the reclaimer uses.

Exit codes: 0 done, 1 could not run, 5 done but some blobs failed.`,
		Args: cobra.ExactArgs(1),
		Run: func(cmd *cobra.Command, args []string) {
			sweepExit(runSweep(cmd, args[0], o))
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.enqueue, "enqueue", false, "queue the blobs found for review by the reclaimers")
	f.BoolVar(&o.apply, "apply", false, "delete the blobs found that qualify now")
	f.BoolVarP(&o.verbose, "verbose", "v", false, "list every blob found")
	cmd.MarkFlagsMutuallyExclusive("enqueue", "apply")
	return cmd
}

// sweepStats are the sweep's counts.
type sweepStats struct {
	// read by the progress line while the walk runs
	shards, shardsDone atomic.Int64
	blobs, found       atomic.Int64

	linked     int64
	queued     int64 // unreferenced but already in the queue
	foundBytes int64
	enqueued   int64
	failed     int64
	decisions  map[string]int64
}

func runSweep(cmd *cobra.Command, configPath string, o sweepOptions) int {
	out, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	config, err := readConfig(configPath)
	if err != nil {
		fmt.Fprintf(stderr, "gc sweep: %v\n", err)
		return sweepExitFailed
	}
	if err := checkReclaimConfig(config); err != nil {
		fmt.Fprintf(stderr, "gc sweep: %v\n", err)
		return sweepExitFailed
	}
	env, err := storage.Open(ctx, config)
	if err != nil {
		fmt.Fprintf(stderr, "gc sweep: %v\n", err)
		return sweepExitFailed
	}
	defer env.Close()
	// The sweep's own reads must not count as accesses.
	ctx = storage.WithoutAccessRecords(ctx)
	q := env.Queue()
	var rec *gc.Reclaimer
	if o.apply {
		if rec, _, err = registry.OpenReclaimer(ctx, config, true); err != nil {
			fmt.Fprintf(stderr, "gc sweep: %v\n", err)
			return sweepExitFailed
		}
	}
	st := &sweepStats{decisions: map[string]int64{}}
	prog := newSweepProgress(stderr, st)
	defer prog.stop()
	mode := "dry run"
	switch {
	case o.enqueue:
		mode = "enqueue"
	case o.apply:
		mode = "apply"
	}
	err = walkBlobShards(ctx, env.Raw, st, stderr, func(shardBlobs map[digest.Digest]*blobEntry) {
		for _, d := range sortedBlobs(shardBlobs) {
			e := shardBlobs[d]
			st.blobs.Add(1)
			if e.linked {
				st.linked++
				continue
			}
			in, err := q.Contains(ctx, d)
			if err != nil {
				st.failed++
				fmt.Fprintf(stderr, "gc sweep: %s: %v\n", d, err)
				continue
			}
			if in {
				st.queued++
				continue
			}
			st.found.Add(1)
			st.foundBytes += e.size
			switch {
			case o.enqueue:
				if err := q.Enqueue(ctx, 0, d); err != nil {
					st.failed++
					fmt.Fprintf(stderr, "gc sweep: enqueue %s: %v\n", d, err)
					continue
				}
				st.enqueued++
			case o.apply:
				dec, err := rec.Review(ctx, d)
				var ae *gc.AbortError
				if errors.As(err, &ae) {
					// fail closed for the whole sweep: nothing can qualify
					fmt.Fprintf(stderr, "gc sweep: %v\n", err)
					st.failed++
					return
				}
				if err != nil {
					fmt.Fprintf(stderr, "gc sweep: %s: %v\n", d, err)
				}
				st.decisions[dec.Reason.String()]++
				if dec.Reason == gc.CheckFailed || dec.Reason == gc.DeleteFailed {
					st.failed++
				}
				if o.verbose {
					fmt.Fprintf(out, "%s\t%d\t%s\n", d, e.size, dec.Reason)
				}
				continue
			}
			if o.verbose {
				fmt.Fprintf(out, "%s\t%d\n", d, e.size)
			}
		}
	})
	prog.stop()
	fmt.Fprintf(out, "gc sweep (%s): %d blobs, %d linked, %d unreferenced already queued, %d unreferenced not queued (%d bytes)",
		mode, st.blobs.Load(), st.linked, st.queued, st.found.Load(), st.foundBytes)
	switch {
	case o.enqueue:
		fmt.Fprintf(out, ", %d enqueued", st.enqueued)
	case o.apply:
		keys := make([]string, 0, len(st.decisions))
		for k := range st.decisions {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(out, ", %s %d", k, st.decisions[k])
		}
	}
	fmt.Fprintln(out)
	if err != nil {
		fmt.Fprintf(stderr, "gc sweep: %v\n", err)
		return sweepExitFailed
	}
	if st.failed > 0 {
		return sweepExitPartial
	}
	return sweepExitOK
}

func readConfig(p string) (*configuration.Configuration, error) {
	fp, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer fp.Close()
	config, err := configuration.Parse(fp)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", p, err)
	}
	return config, nil
}

// blobEntry is a blob with data, as the sweep saw it.
type blobEntry struct {
	size   int64
	linked bool // something sits at one of its reverse link paths
}

// walkBlobShards walks the blob store one shard at a time, so memory is
// bounded by the largest shard, and hands each shard's blobs with data to
// fn. What cannot be read (a shard, part of a blob directory) is reported to
// stderr and counted as failed, and its blobs are never handed on: whether
// anything links them is unknown.
func walkBlobShards(ctx context.Context, d storagedriver.StorageDriver, st *sweepStats, stderr io.Writer, fn func(map[digest.Digest]*blobEntry)) error {
	shards, err := layout.Shards(ctx, d)
	if err != nil {
		return fmt.Errorf("list blob shards: %w", err)
	}
	st.shards.Store(int64(len(shards)))
	unreadable := func(p, detail string) {
		st.failed++
		fmt.Fprintf(stderr, "gc sweep: %s: unreadable, not swept: %s\n", p, detail)
	}
	for _, shard := range shards {
		blobs := map[digest.Digest]*blobEntry{}
		err := layout.WalkShard(ctx, d, shard, layout.ShardVisitor{Blob: func(b *layout.Blob) {
			switch {
			case b.Unreadable != "":
				unreadable(b.Dir, b.Unreadable)
			case b.HasData: // reverse links without data: linkdb verify's business
				blobs[b.Digest] = &blobEntry{size: b.Size, linked: b.Reverse > 0}
			}
		}})
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			unreadable(shard, err.Error())
		}
		fn(blobs)
		st.shardsDone.Add(1)
	}
	return nil
}

func sortedBlobs(m map[digest.Digest]*blobEntry) []digest.Digest {
	out := make([]digest.Digest, 0, len(m))
	for d := range m {
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// sweepProgress draws a one-line progress bar on a terminal, or logs a
// line every 30 seconds otherwise.
type sweepProgress struct {
	w    io.Writer
	st   *sweepStats
	tty  bool
	done chan struct{}
	once bool
}

func newSweepProgress(w io.Writer, st *sweepStats) *sweepProgress {
	p := &sweepProgress{w: w, st: st, tty: linkdb.IsTerminal(w), done: make(chan struct{})}
	every := 30 * time.Second
	if p.tty {
		every = 200 * time.Millisecond
	}
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-p.done:
				return
			case <-t.C:
				p.draw()
			}
		}
	}()
	return p
}

func (p *sweepProgress) draw() {
	st := p.st
	shards, done := st.shards.Load(), st.shardsDone.Load()
	pct := int64(0)
	if shards > 0 {
		pct = done * 100 / shards
	}
	const width = 30
	bar := make([]byte, width)
	for i := range bar {
		bar[i] = ' '
		if int64(i) < pct*width/100 {
			bar[i] = '='
		}
	}
	line := fmt.Sprintf("sweep [%s] %3d%% shard %d/%d, %d blobs, %d unreferenced not queued", bar, pct, done, shards, st.blobs.Load(), st.found.Load())
	if p.tty {
		fmt.Fprintf(p.w, "\r%s", line)
	} else {
		fmt.Fprintln(p.w, line)
	}
}

func (p *sweepProgress) stop() {
	if p.once {
		return
	}
	p.once = true
	close(p.done)
	if p.tty {
		p.draw()
		fmt.Fprintln(p.w)
	}
}
