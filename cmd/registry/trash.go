package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	distregistry "github.com/distribution/distribution/v3/registry"
	"github.com/spf13/cobra"

	"github.com/reclaim-registry/reclaim/gc"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/reclaim/trashentry"
)

// `registry trash list|restore|purge`: recoverable deletion through the GC
// API (docs/api.md, "Trash"). The answers are decoded into local shapes:
// the CLI only reads the JSON the API documents (docs/openapi.yaml).

type trashListing struct {
	Entries     []trashentry.Entry `json:"entries"`
	Total       int                `json:"total"`
	BytesHeld   int64              `json:"bytes_held"`
	KeepSeconds int64              `json:"keep_seconds"`
}

type trashRestoreReport struct {
	Entries []struct {
		Entry   trashentry.Entry   `json:"entry"`
		Outcome trashentry.Outcome `json:"outcome"`
		Detail  string             `json:"detail"`
	} `json:"entries"`
	Restored int `json:"restored"`
	Left     int `json:"left"`
}

type trashPurgeReport struct {
	Entries []struct {
		Entry trashentry.Entry `json:"entry"`
		Blob  *gc.Decision     `json:"blob"`
		Error string           `json:"error"`
	} `json:"entries"`
	BytesFreed int64 `json:"bytes_freed"`
	BlobsFreed int   `json:"blobs_freed"`
}

// trashSelection is what list filters by and restore selects.
type trashSelection struct {
	repo, tag, digest, run, plan string
}

func (s *trashSelection) bind(cmd *cobra.Command) {
	cmd.Flags().StringVar(&s.repo, "repository", "", "the repository (restore: with --tag or --digest)")
	cmd.Flags().StringVar(&s.tag, "tag", "", "a tag of --repository")
	cmd.Flags().StringVar(&s.digest, "digest", "", "a manifest or blob digest of --repository")
	cmd.Flags().StringVar(&s.run, "run", "", "the GC run that removed the entries")
	cmd.Flags().StringVar(&s.plan, "plan", "", "the retention plan whose apply removed the entries")
}

func (s *trashSelection) query() url.Values {
	q := url.Values{}
	for k, v := range map[string]string{"repository": s.repo, "tag": s.tag, "digest": s.digest, "run": s.run, "plan": s.plan} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return q
}

func newTrashCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "trash",
		Short: "Recoverable deletion: list, restore and purge what GC, the reclaimer and retention removed",
		Long: "The trash (trash.keep > 0) keeps the data of what GC, the reclaimer and retention\n" +
			"remove until the entry expires (docs/api.md, \"Trash\").\n\n" +
			"Exit codes: 0 done, 1 failure, 2 request rejected (also: the trash is off),\n" +
			"3 unauthorized, 4 retry later, 5 done with some entries failed.",
	}
	root.AddCommand(newTrashListCommand(), newTrashRestoreCommand(), newTrashPurgeCommand(), newTrashReindexCommand())
	return root
}

func newTrashListCommand() *cobra.Command {
	var f gcClientFlags
	var sel trashSelection
	var since, until string
	var limit int
	cmd := clientCommand(&f, &cobra.Command{
		Use:   "list",
		Short: "List the trash's entries, newest first (reads the whole trash index)",
		Example: "  registry trash list --repository team/app\n" +
			"  registry trash list --run 2b8819ebc067f480190a9619 --json\n" +
			"  registry trash list --since 24h",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			q := sel.query()
			for k, v := range map[string]string{"since": since, "until": until} {
				if v == "" {
					continue
				}
				t, err := timeOrAgo(v)
				if err != nil {
					return &exitError{exitFailure, fmt.Errorf("--%s: %w", k, err)}
				}
				q.Set(k, t.UTC().Format(time.RFC3339))
			}
			if limit > 0 {
				q.Set("limit", strconv.Itoa(limit))
			}
			var l trashListing
			return f.answer(cmd, http.MethodGet, "trash", q, nil, &l, func(w io.Writer) { writeTrashTable(w, &l) })
		},
	})
	sel.bind(cmd)
	cmd.Flags().StringVar(&since, "since", "", "removed within this long (72h) or at or after this RFC 3339 time")
	cmd.Flags().StringVar(&until, "until", "", "removed more than this long ago, or before this RFC 3339 time")
	cmd.Flags().IntVar(&limit, "limit", 0, "show at most this many entries, the newest (the server's bound: 1000)")
	return cmd
}

// timeOrAgo reads a duration (that long ago) or an RFC 3339 time.
func timeOrAgo(s string) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		return time.Now().Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return t, fmt.Errorf("%q: want a duration (72h) or an RFC 3339 time", s)
	}
	return t, nil
}

func writeTrashTable(w io.Writer, l *trashListing) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tREMOVED\tEXPIRES\tKIND\tREPOSITORY\tTAG/DIGEST\tSIZE\tBY\tRUN/PLAN")
	for _, e := range l.Entries {
		what := shortDigest(e.Digest.String())
		if e.Tag != "" {
			what = ":" + e.Tag + " " + what
		}
		from := e.Run
		if e.Plan != "" {
			from = "plan " + e.Plan
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.ID, e.Removed.Local().Format(time.DateTime),
			e.Expires.Local().Format(time.DateTime), e.Kind, orDash(e.Repo), what, shortBytes(e.Size), e.By, orDash(from))
	}
	tw.Flush() //nolint:errcheck
	shown := ""
	if len(l.Entries) < l.Total {
		shown = fmt.Sprintf(" (the newest %d shown)", len(l.Entries))
	}
	fmt.Fprintf(w, "%d entries%s, %s held; entries are kept %s\n", l.Total, shown, shortBytes(l.BytesHeld),
		time.Duration(l.KeepSeconds)*time.Second)
}

// shortDigest is "sha256:" and the first 12 hex digits.
func shortDigest(d string) string {
	if alg, hex, ok := strings.Cut(d, ":"); ok && len(hex) > 12 {
		return alg + ":" + hex[:12]
	}
	return d
}

func shortBytes(n int64) string {
	s, _, _ := strings.Cut(humanBytes(n), " (")
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newTrashRestoreCommand() *cobra.Command {
	var f gcClientFlags
	var sel trashSelection
	cmd := clientCommand(&f, &cobra.Command{
		Use:   "restore",
		Short: "Put back what a run, a retention plan, or a repository's tag or digest removed",
		Long: "Give exactly one of --run, --plan, or --repository with --tag or --digest. Needs delete\n" +
			"on every repository restored. A tag is written back only where it is absent: one pushed\n" +
			"again meanwhile is left (tag_moved). Exit 5 when an entry failed (a retry may finish it).",
		Example: "  registry trash restore --run 2b8819ebc067f480190a9619\n" +
			"  registry trash restore --plan 5f0c0e6a9b7f2e4c8a3b1d09\n" +
			"  registry trash restore --repository team/app --tag v1",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var rep trashRestoreReport
			err := f.answer(cmd, http.MethodPost, "trash/restore", sel.query(), nil, &rep, func(w io.Writer) {
				fmt.Fprintf(w, "restored %d, left %d\n", rep.Restored, rep.Left)
				for _, e := range rep.Entries {
					fmt.Fprintf(w, "  %-13s %-10s %s %s%s\n", e.Outcome, e.Entry.Kind, e.Entry.Repo, entryName(e.Entry), suffix(e.Detail))
				}
			})
			if err != nil {
				return err
			}
			failed := 0
			for _, e := range rep.Entries {
				if e.Outcome == trashentry.Failed {
					failed++
				}
			}
			if failed > 0 {
				return &exitError{exitPartially, fmt.Errorf("%d entries failed to restore; they stay in the trash", failed)}
			}
			return nil
		},
	})
	sel.bind(cmd)
	return cmd
}

func entryName(e trashentry.Entry) string {
	if e.Tag != "" {
		return ":" + e.Tag + " (" + shortDigest(e.Digest.String()) + ")"
	}
	return e.Digest.String()
}

func suffix(detail string) string {
	if detail == "" {
		return ""
	}
	return ": " + detail
}

func newTrashPurgeCommand() *cobra.Command {
	var f gcClientFlags
	var olderThan time.Duration
	cmd := clientCommand(&f, &cobra.Command{
		Use:   "purge --older-than D",
		Short: "Free now what entries removed longer ago than D hold, whatever their expiry",
		Long: "Drops the holds of the entries removed more than --older-than ago (0s: all), then deletes\n" +
			"each blob's data where nothing else links or holds it and it was not accessed within the\n" +
			"window. Needs registry:trash:purge. Exit 5 when a hold could not be removed.",
		Example: "  registry trash purge --older-than 72h",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var rep trashPurgeReport
			err := f.answer(cmd, http.MethodPost, "trash/purge", url.Values{"older_than": {olderThan.String()}}, nil, &rep, func(w io.Writer) {
				fmt.Fprintf(w, "purged %d entries, freed %s (%d blobs)\n", len(rep.Entries), humanBytes(rep.BytesFreed), rep.BlobsFreed)
				for _, e := range rep.Entries {
					switch {
					case e.Error != "":
						fmt.Fprintf(w, "  error %s %s: %s\n", e.Entry.ID, e.Entry.Digest, e.Error)
					case e.Blob != nil && !e.Blob.Deleted() && (f.verbose || e.Blob.Reason != reclaim.ReasonInTrash):
						fmt.Fprintf(w, "  kept %s (%s)%s\n", e.Entry.Digest, e.Blob.Reason, suffix(e.Blob.Detail))
					}
				}
			})
			if err != nil {
				return err
			}
			failed := 0
			for _, e := range rep.Entries {
				if e.Error != "" {
					failed++
				}
			}
			if failed > 0 {
				return &exitError{exitPartially, fmt.Errorf("%d holds could not be removed; those entries stay", failed)}
			}
			return nil
		},
	})
	cmd.Flags().DurationVar(&olderThan, "older-than", 0, "purge entries removed longer ago than this (e.g. 72h; 0s: all)")
	_ = cmd.MarkFlagRequired("older-than")
	return cmd
}

func init() {
	distregistry.RootCmd.AddCommand(newTrashCommand())
}

// answer sends the request (body: JSON, or nil), decodes its answer into
// v and prints it: as sent with --json, else through human. The caller
// judges v for the exit code afterwards.
func (f *gcClientFlags) answer(cmd *cobra.Command, method, path string, q url.Values, body []byte, v any, human func(io.Writer)) error {
	out, err := f.send(cmd, method, path, q, body)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(out, v); err != nil {
		return &exitError{exitFailure, fmt.Errorf("decode the answer: %w", err)}
	}
	w := cmd.OutOrStdout()
	if f.json {
		_, err := w.Write(out)
		return err
	}
	human(w)
	return nil
}
