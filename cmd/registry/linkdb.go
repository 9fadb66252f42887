package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/distribution/distribution/v3/configuration"
	distregistry "github.com/distribution/distribution/v3/registry"
	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/distribution/distribution/v3/registry/storage/driver/factory"
	"github.com/spf13/cobra"

	"github.com/reclaim-registry/reclaim/internal/config"
	"github.com/reclaim-registry/reclaim/storage/budget"
	"github.com/reclaim-registry/reclaim/storage/linkdb"
)

// Exit codes of `registry linkdb rebuild`.
const (
	rebuildExitDone       = 0 // finished; the marker is written (unless --dry-run)
	rebuildExitFailed     = 1 // could not run, or interrupted (run again to resume)
	rebuildExitDamaged    = 2 // finished, but found damage it cannot repair: no marker
	rebuildExitIncomplete = 3 // finished, but some parts could not be read: no marker
	// finished and marked complete (unless --dry-run), but some forward
	// links point at data that is already gone: verify's exit code for it
	rebuildExitBroken = linkdb.ExitBroken
)

// linkdbExit is os.Exit, replaced by tests.
var linkdbExit = os.Exit

func init() {
	cmd := &cobra.Command{
		Use:   "linkdb",
		Short: "Rebuild and verify Reclaim's reverse-link database",
		Long: `The reverse-link database records, next to every blob, which repositories
link it. GC needs it complete before it deletes shared blobs. "rebuild"
creates it for data written before the middleware was deployed (safe while
the registry serves); "verify" checks it. See docs/operations.md.`,
	}
	cmd.AddCommand(newRebuildCmd(), newVerifyCmd())
	distregistry.RootCmd.AddCommand(cmd)
}

func newRebuildCmd() *cobra.Command {
	var (
		opts           linkdb.RebuildOptions
		checkpointFile string
		progressEvery  time.Duration
		asJSON         bool
		fsyncEach      bool
		budgetRate     int
		budgetInFlight int
	)
	cmd := &cobra.Command{
		Use:   "rebuild <config>",
		Short: "Write missing reverse links and referrers entries, remove stale ones, then mark the link database complete",
		Long: `Exit codes:
  0  finished; the link database is marked complete (unless --dry-run)
  1  could not run, or interrupted: run it again to resume
  2  finished, but found damage it cannot repair (a directory or dangling entry
     at a link path, a forward link whose content is not its digest, a corrupt
     manifest): not marked complete; repair what it lists, run again
  3  finished, but some parts could not be read: not marked complete
  4  finished and marked complete (unless --dry-run), but some forward links point
     at blobs whose data is already gone (broken_forward; verify exits 4 for them
     too): the data was lost before, GC is safe, and no rebuild brings it back;
     push those images again or delete the dangling links

With --dry-run it writes nothing and lists what verify would (missing reverse
links and referrers entries, stale entries, broken and corrupt links), with the
exit code the real run would give.`,
		Args: cobra.MaximumNArgs(1),
		Run: func(cmd *cobra.Command, args []string) {
			linkdbExit(runRebuild(cmd, args, opts, checkpointFile, progressEvery, asJSON, fsyncEach, [2]int{budgetRate, budgetInFlight}))
		},
	}
	f := cmd.Flags()
	f.IntVar(&opts.Workers, "workers", 4, "repositories (then blob shards) walked in parallel, and directories listed at once when finding the repositories")
	f.BoolVarP(&opts.DryRun, "dry-run", "d", false, "report what would change; write nothing (no checkpoint, no marker)")
	f.BoolVar(&opts.Offline, "offline", false, "no registry serves this storage: remove stale entries without a GC fence")
	f.DurationVar(&opts.MinAge, "min-age", 10*time.Minute, "leave stale entries younger than this (pushes in flight); 0: no guard")
	f.StringVar(&checkpointFile, "checkpoint", "", "keep the checkpoint in this local file (default: in the storage, reclaim/rebuild/checkpoint)")
	f.BoolVar(&opts.Restart, "restart", false, "discard the checkpoint and start over")
	f.DurationVar(&progressEvery, "progress-every", 30*time.Second, "interval of progress log lines when stderr is not a terminal")
	f.BoolVar(&asJSON, "json", false, "print the result as JSON")
	f.IntVar(&budgetRate, "budget-rate", -1, "storage calls per second (0: no limit; default: the config's budget.rate, docs/operations.md \"GC's storage budget\")")
	f.IntVar(&budgetInFlight, "budget-inflight", -1, "storage calls at once (0: no bound; default: the config's budget.inflight)")
	f.BoolVar(&fsyncEach, "fsync-each", false, "filesystem driver: write each reverse link through the driver, fsynced one by one, instead of making them durable in one syncfs before each checkpoint and before the marker")
	return cmd
}

func runRebuild(cmd *cobra.Command, args []string, opts linkdb.RebuildOptions, checkpointFile string, progressEvery time.Duration, asJSON, fsyncEach bool, budgetFlags [2]int) int {
	stderr := cmd.ErrOrStderr()
	if opts.MinAge == 0 {
		opts.MinAge = -1 // linkdb's zero value means "default"; the flag's means "none"
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	conf, d, err := openStorage(ctx, args)
	if err != nil {
		fmt.Fprintf(stderr, "linkdb rebuild: %v\n", err)
		return rebuildExitFailed
	}
	reclaim, on, err := config.Load(conf)
	if err != nil {
		fmt.Fprintf(stderr, "linkdb rebuild: %s\n", oneLine(err))
		return rebuildExitFailed
	}
	d, ctx = withinBudget(ctx, d, reclaim.Budget, budgetFlags)
	if !on && !opts.Offline {
		fmt.Fprintln(stderr, "linkdb rebuild: warning: this config does not enable the reclaim storage middleware. "+
			"A rebuild while serving is complete only if every registry instance writing to this storage runs with it.")
	}
	fencer, review, closeFencer, err := openFencer(reclaim)
	if err != nil {
		fmt.Fprintf(stderr, "linkdb rebuild: %v\n", err)
		return rebuildExitFailed
	}
	defer closeFencer()
	opts.Fencer, opts.Review = fencer, review
	if fencer == nil && !opts.Offline && !opts.DryRun {
		fmt.Fprintln(stderr, "linkdb rebuild: no shared Redis configured for the reclaim middleware: stale entries are reported, not removed (use --offline when no registry serves this storage)")
	}
	switch {
	case opts.DryRun:
	case checkpointFile != "":
		opts.Checkpoint = linkdb.FileCheckpoint(checkpointFile)
	default:
		opts.Checkpoint = linkdb.StorageCheckpoint(d)
	}
	opts.Progress = &linkdb.Progress{Out: stderr, TTY: linkdb.IsTerminal(stderr), LogEvery: progressEvery}
	if !fsyncEach {
		opts.FilesystemRoot = filesystemRoot(conf)
	}

	res, err := linkdb.Rebuild(ctx, d, opts)
	if res != nil {
		if werr := writeRebuildResult(cmd.OutOrStdout(), res, asJSON); werr != nil {
			fmt.Fprintf(stderr, "linkdb rebuild: %v\n", werr)
		}
	}
	switch {
	case err == nil:
		return rebuildExitDone
	case errors.Is(err, linkdb.ErrDamaged):
		fmt.Fprintf(stderr, "linkdb rebuild: %v; the link database is NOT marked complete. Repair or delete what is listed as corrupt, then run it again\n", err)
		return rebuildExitDamaged
	case errors.Is(err, linkdb.ErrBroken):
		fmt.Fprintf(stderr, "linkdb rebuild: %v: %s\n", err, linkdb.BrokenForward.Remedy())
		return rebuildExitBroken
	case errors.Is(err, linkdb.ErrIncomplete):
		fmt.Fprintf(stderr, "linkdb rebuild: %v; fix what is listed as unreadable and run it again (finished parts are skipped)\n", err)
		return rebuildExitIncomplete
	case ctx.Err() != nil:
		fmt.Fprintln(stderr, "linkdb rebuild: interrupted; run the same command again to resume from the checkpoint")
		return rebuildExitFailed
	default:
		fmt.Fprintf(stderr, "linkdb rebuild: %v\n", err)
		return rebuildExitFailed
	}
}

func writeRebuildResult(w io.Writer, res *linkdb.RebuildResult, asJSON bool) error {
	if asJSON {
		e := json.NewEncoder(w)
		e.SetIndent("", "  ")
		return e.Encode(res)
	}
	verb := ""
	if res.DryRun {
		verb = " (dry-run: would have)"
	}
	_, err := fmt.Fprintf(w, `rebuild%s: %d repositories (%d skipped from checkpoint), %d forward links, %d shards (%d skipped)
  reverse links: %d added, %d present, %d rewritten (bad content)
  referrers entries: %d added
  stale entries: %d removed, %d kept, %d restored; %d reverse links seen
  complete: %v (since %s), took %s
`, verb, res.Repositories, res.RepositoriesSkipped, res.ForwardLinks, res.Shards, res.ShardsSkipped,
		res.ReverseAdded, res.ReversePresent, res.ReverseRewritten, res.ReferrersAdded,
		res.StaleRemoved, res.StaleKept, res.StaleRestored, res.ReverseLinks,
		res.Complete, res.Started.Format(time.RFC3339), res.Duration.Round(time.Millisecond))
	if err != nil {
		return err
	}
	for _, k := range linkdb.Kinds {
		if n := res.Counts[k]; n > 0 {
			fmt.Fprintf(w, "  %-16s %d  %s\n", k, n, k.Message())
			if r := k.Remedy(); r != "" {
				fmt.Fprintf(w, "  %-16s    what to do: %s\n", "", r)
			}
		}
	}
	const perKind = 20
	shown := map[linkdb.Kind]int{}
	for _, p := range res.Problems {
		if shown[p.Kind] >= perKind {
			continue
		}
		shown[p.Kind]++
		line := fmt.Sprintf("    %-16s %s", p.Kind, p.Path)
		if p.Detail != "" {
			line += "  (" + p.Detail + ")"
		}
		if _, err := fmt.Fprintln(w, line); err != nil {
			return err
		}
	}
	return nil
}

func newVerifyCmd() *cobra.Command {
	var (
		opts   linkdb.VerifyOptions
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "verify <config>",
		Short: "Check the reverse-link database against the forward links; --repair writes missing reverse links",
		Long: `Reads every forward and reverse link. A forward link without its reverse
link (missing_reverse) is the one finding that lets GC delete a blob in use,
so verify does not leave it at a report: without --repair it removes the
completeness marker at once (GC then deletes no blob until the database is
whole again); with --repair it writes the missing reverse links (as rebuild
does) and, when the repositories had nothing else wrong, marks the database
complete. Apart from that, verify writes nothing.

Exit codes (the most urgent that applies):
  0  clean (blobs no repository links are listed as reclaimable, which is normal)
  1  leaks only: stale reverse links or stale referrers entries
  2  data-loss risk or damage: forward links without reverse links, missing
     referrers entries, corrupt link files (bad content, or a directory or
     dangling entry at a link path; tag links included), manifests that do
     not match their digest
  3  incomplete: some parts could not be read, or verify could not run
  4  broken links or tags only: forward links to blobs whose data is already
     gone (broken_forward; rebuild exits 4 for them too), or tag directories
     without a current link (dangling_tag: listed, not pullable). Not a risk
     GC adds and nothing rebuild repairs: push those images again or delete
     the links; DELETE /v2/<repository>/manifests/<tag> removes a dangling tag`,
		Args: cobra.MaximumNArgs(1),
		Run: func(cmd *cobra.Command, args []string) {
			linkdbExit(runVerify(cmd, args, opts, asJSON))
		},
	}
	f := cmd.Flags()
	f.IntVar(&opts.Workers, "workers", 4, "repositories (then blob shards) checked in parallel")
	f.IntVar(&opts.MaxFindings, "max-findings", 100, "findings listed per kind (counts are always exact)")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	f.BoolVar(&opts.Repair, "repair", false, "write missing reverse links, and mark the link database complete when nothing else is wrong")
	return cmd
}

func runVerify(cmd *cobra.Command, args []string, opts linkdb.VerifyOptions, asJSON bool) int {
	stderr := cmd.ErrOrStderr()
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	_, d, err := openStorage(ctx, args)
	if err != nil {
		fmt.Fprintf(stderr, "linkdb verify: %v\n", err)
		return linkdb.ExitIncomplete
	}
	if !asJSON {
		opts.Progress = &linkdb.Progress{Out: stderr, TTY: linkdb.IsTerminal(stderr), LogEvery: 30 * time.Second}
	}
	rep, err := linkdb.Verify(ctx, d, opts)
	if err != nil {
		fmt.Fprintf(stderr, "linkdb verify: %v\n", err)
		return linkdb.ExitIncomplete
	}
	if asJSON {
		e := json.NewEncoder(cmd.OutOrStdout())
		e.SetIndent("", "  ")
		err = e.Encode(rep)
	} else {
		err = rep.WriteText(cmd.OutOrStdout())
	}
	if err != nil {
		fmt.Fprintf(stderr, "linkdb verify: %v\n", err)
		return linkdb.ExitIncomplete
	}
	return rep.ExitCode
}

// openStorage reads the config the way upstream's garbage-collect does and
// creates its storage driver raw: no storage middleware, so linkdb's reads
// are not recorded as accesses and its writes are not classified again.
// filesystemRoot is the filesystem driver's root directory in conf, or ""
// when conf names another driver.
func filesystemRoot(conf *configuration.Configuration) string {
	if conf.Storage.Type() != "filesystem" {
		return ""
	}
	if root, ok := conf.Storage.Parameters()["rootdirectory"]; ok {
		return fmt.Sprint(root)
	}
	return "/var/lib/registry" // the driver's default
}

func openStorage(ctx context.Context, args []string) (*configuration.Configuration, storagedriver.StorageDriver, error) {
	conf, err := readConfig(configPath(args))
	if err != nil {
		return nil, nil, err
	}
	d, err := factory.Create(ctx, conf.Storage.Type(), conf.Storage.Parameters())
	if err != nil {
		return nil, nil, fmt.Errorf("create %s driver: %w", conf.Storage.Type(), err)
	}
	return conf, d, nil
}

// withinBudget puts the rebuild's calls within a GC storage budget: the
// config's (none without the middleware), its rate and in-flight bound
// replaced by the --budget-rate and --budget-inflight flags (flags[0],
// flags[1]) unless negative. It slows itself when the store throttles.
func withinBudget(ctx context.Context, d storagedriver.StorageDriver, c config.Budget, flags [2]int) (storagedriver.StorageDriver, context.Context) {
	if flags[0] >= 0 {
		c.Rate = flags[0]
	}
	if flags[1] >= 0 {
		c.InFlight = flags[1]
	}
	b := budget.New(budget.Options{Rate: max(c.Rate, 0), InFlight: c.InFlight})
	return budget.Wrap(d, b), budget.Mark(ctx)
}
