package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	distregistry "github.com/distribution/distribution/v3/registry"
	"github.com/spf13/cobra"

	"github.com/reclaim-registry/reclaim/retention"
)

// `registry retention preview|apply|plans`: deploy-aware retention through
// the GC API (docs/api.md, "Retention").

func newRetentionCommand() *cobra.Command {
	root := &cobra.Command{Use: "retention", Short: "Deploy-aware retention: preview plans, apply them (docs/api.md)"}
	root.AddCommand(newRetentionPreviewCommand(), newRetentionApplyCommand(), newRetentionPlansCommand())
	return root
}

// policyFlags are the per-request overrides of the configured policy;
// only the flags given are sent.
type policyFlags struct {
	keep, slack, limit        int
	minAge, pulledWithin      time.Duration
	include, exclude, sources []string
}

func (p *policyFlags) bind(cmd *cobra.Command) {
	cmd.Flags().IntVar(&p.keep, "keep-newest", 0, "versions kept where none is in use (N)")
	cmd.Flags().IntVar(&p.slack, "rollback-slack", 0, "versions kept below the oldest in use (K)")
	cmd.Flags().DurationVar(&p.minAge, "min-age", 0, "retention age: only older versions may go, e.g. 2160h")
	cmd.Flags().DurationVar(&p.pulledWithin, "pulled-within", 0, "keep versions pulled within this long, e.g. 720h (needs retention.pulledwithin configured)")
	cmd.Flags().StringArrayVar(&p.include, "include", nil, "tag pattern the policy manages (repeatable)")
	cmd.Flags().StringArrayVar(&p.exclude, "exclude", nil, "tag pattern the policy leaves alone (repeatable)")
	cmd.Flags().StringArrayVar(&p.sources, "source", nil, "in-use source this repository relies on (repeatable; default all)")
	cmd.Flags().IntVar(&p.limit, "cap", 0, "candidates per plan at most (the oldest are kept in the plan)")
}

func (p *policyFlags) override(cmd *cobra.Command) retention.PolicyOverride {
	var o retention.PolicyOverride
	set := cmd.Flags().Changed
	if set("keep-newest") {
		o.KeepNewest = &p.keep
	}
	if set("rollback-slack") {
		o.RollbackSlack = &p.slack
	}
	if set("cap") {
		o.Cap = &p.limit
	}
	if set("min-age") {
		d := retention.Duration(p.minAge)
		o.MinAge = &d
	}
	if set("pulled-within") {
		d := retention.Duration(p.pulledWithin)
		o.PulledWithin = &d
	}
	for _, f := range []struct {
		name string
		v    []string
		dst  **[]string
	}{{"include", p.include, &o.Include}, {"exclude", p.exclude, &o.Exclude}, {"source", p.sources, &o.Sources}} {
		if set(f.name) {
			v := f.v
			*f.dst = &v
		}
	}
	return o
}

func newRetentionPreviewCommand() *cobra.Command {
	var f gcClientFlags
	var p policyFlags
	cmd := clientCommand(&f, &cobra.Command{
		Use:   "preview <repository>...",
		Short: "Build and store a retention plan per repository; deletes nothing",
		Long: "Builds the plan of each repository (every protection applied), stores it for\n" +
			"retention.plankeep and prints it. A run the in-use index cannot vouch for (empty,\n" +
			"stale, unreadable) aborts with exit code 4 and previews nothing more.",
		Example: "  registry retention preview team/app --min-age 2160h --rollback-slack 3\n" +
			"  registry retention preview team/app team/worker --json",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			body, err := json.Marshal(p.override(cmd))
			if err != nil {
				return err
			}
			for _, repo := range args {
				var plan retention.Plan
				if err := f.answer(cmd, http.MethodPost, "repositories/"+repo+"/retention/preview", nil, body, &plan,
					func(w io.Writer) { writePlan(w, &plan, f.verbose) }); err != nil {
					return err
				}
			}
			return nil
		},
	})
	p.bind(cmd)
	return cmd
}

// writePlan prints a plan's summary, and with verbose every version.
func writePlan(w io.Writer, plan *retention.Plan, verbose bool) {
	if plan.Skip != nil {
		fmt.Fprintf(w, "%s: plan %s skipped (%s): %s\n", plan.Repository, plan.ID, plan.Skip.Reason, plan.Skip.Detail)
		return
	}
	tags := 0
	for _, c := range plan.Candidates {
		tags += len(c.Tags)
	}
	fmt.Fprintf(w, "%s: plan %s: %d versions to delete (%d tags), %d kept, %d over the cap, %d dropped (now in use)\n",
		plan.Repository, plan.ID, len(plan.Candidates), tags, len(plan.Kept), plan.Trimmed, len(plan.Dropped))
	if verbose {
		for _, e := range append(append([]retention.Entry{}, plan.Candidates...), plan.Kept...) {
			fmt.Fprintf(w, "  %-20s %s %s %v\n", e.Reason, e.Time.Format(time.DateOnly), e.Digest, e.Tags)
		}
	}
}

func newRetentionApplyCommand() *cobra.Command {
	var f gcClientFlags
	var o retention.ApplyOptions
	cmd := clientCommand(&f, &cobra.Command{
		Use:   "apply <repository> <plan-id>",
		Short: "Delete a plan's candidate tags, each after a fresh check; GC then collects what they held",
		Long: "Refused (exit 4) when the plan is older than retention.planmaxage or the policy changed.\n" +
			"Tags that became in use, pinned or moved since the plan are left and listed; a run the index\n" +
			"stops vouching for stops (exit 4); a tag that could not be checked or deleted exits 5.\n" +
			"When the repository's in-use manifests changed since the plan, the output says so: a version\n" +
			"that became in use protects only itself, not the versions the policy keeps around it;\n" +
			"--stop-if-index-changed stops the run then, before its next delete (exit 4).",
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			body, err := json.Marshal(o)
			if err != nil {
				return err
			}
			var rep retention.ApplyReport
			err = f.answer(cmd, http.MethodPost, "repositories/"+args[0]+"/retention/plans/"+args[1]+"/apply", nil, body, &rep, func(w io.Writer) {
				fmt.Fprintf(w, "%s: plan %s: %d tags deleted, %d left\n", rep.Repository, rep.PlanID, len(rep.Deleted), len(rep.Skipped))
				for _, s := range rep.Skipped {
					fmt.Fprintf(w, "  left %s (%s) %s\n", s.Tag, s.Reason, s.Detail)
				}
				if rep.InUseChanged {
					fmt.Fprintf(w, "  %s (%d manifests now in use, %d no longer)\n", rep.InUseNote, len(rep.InUseAdded), len(rep.InUseRemoved))
				}
			})
			if err != nil {
				return err
			}
			return applyExit(&rep)
		},
	})
	cmd.Flags().BoolVar(&o.StopIfIndexChanged, "stop-if-index-changed", false, "stop before the next delete once the repository's in-use manifests differ from the plan's")
	return cmd
}

func applyExit(rep *retention.ApplyReport) error {
	if rep.Aborted != nil {
		return &exitError{exitRetry, fmt.Errorf("stopped (%s): %s", rep.Aborted.Reason, rep.Aborted.Detail)}
	}
	for _, s := range rep.Skipped {
		if s.Reason == retention.ChangedCheckFail || s.Reason == retention.ChangedDeleteErr {
			return &exitError{exitPartially, fmt.Errorf("%s: %s %s", s.Tag, s.Reason, s.Detail)}
		}
	}
	return nil
}

func newRetentionPlansCommand() *cobra.Command {
	var f gcClientFlags
	var since time.Duration
	cmd := clientCommand(&f, &cobra.Command{
		Use:   "plans [<repository>]",
		Short: "List stored plans, newest first: of one repository, or of all",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := "retention/plans"
			if len(args) == 1 {
				path = "repositories/" + args[0] + "/retention/plans"
			}
			q := url.Values{}
			if since > 0 {
				q.Set("since", time.Now().Add(-since).UTC().Format(time.RFC3339))
			}
			out, err := f.send(cmd, http.MethodGet, path, q, nil)
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(out)
			return err
		},
	})
	cmd.Flags().DurationVar(&since, "since", 0, "only plans made within this long (default: all kept)")
	return cmd
}

func init() {
	distregistry.RootCmd.AddCommand(newRetentionCommand())
}
