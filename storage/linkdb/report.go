package linkdb

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"
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
	// entries, or corrupt link files. Do not run GC before a repair (and
	// for corrupt links, before an operator looked).
	ExitDataLoss = 2
	// ExitIncomplete: verify could not read everything (or could not run at
	// all). What it printed is true, but it is not the whole picture.
	ExitIncomplete = 3
	// ExitBroken: the worst finding is broken_forward, a link to data
	// that is already gone, or dangling_tag, a listed tag that cannot be
	// pulled. The link database is sound and GC is safe; the image or the
	// tag is broken (Kind.Remedy). rebuild exits with it too for
	// broken_forward, after it marked the database complete.
	ExitBroken = 4
)

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
	Repair              bool           `json:"repair"`           // --repair
	ReverseRepaired     int64          `json:"reverse_repaired"` // missing reverse links written by --repair
	// MarkerRemoved: verify found a forward link without its reverse
	// link that it did not write back, and removed the marker, so GC
	// deletes no blob on the strength of the database until it is whole.
	MarkerRemoved bool `json:"marker_removed"`
	// MarkerWritten: --repair left every forward link with its reverse
	// link and found nothing else wrong in the repositories, so it marked
	// the database complete (since Started), as a rebuild would have.
	MarkerWritten bool      `json:"marker_written"`
	Findings      []Problem `json:"findings"`
	ExitCode      int       `json:"exit_code"`
}

func (r *Report) exitCode() int {
	c := r.Counts
	switch {
	case c[MissingReverse]+c[MissingReferrer]+c[Corrupt] > 0:
		return ExitDataLoss
	case c[Unreadable] > 0:
		return ExitIncomplete
	case c[BrokenForward]+c[DanglingTag] > 0:
		return ExitBroken
	case c[StaleReverse]+c[StaleReferrer] > 0:
		return ExitLeaks
	}
	return ExitClean
}

// WriteText writes the human summary of r.
func (r *Report) WriteText(w io.Writer) error {
	bw := &errWriter{w: w}
	fmt.Fprintf(bw, "link database verify: %d repositories, %d forward links, %d reverse links, %d blobs, %d referrers entries, %d tag links (%s)\n",
		r.Repositories, r.ForwardLinks, r.ReverseLinks, r.Blobs, r.ReferrerEntries, r.TagLinks, r.Duration.Round(time.Millisecond))
	switch {
	case r.MarkerRemoved:
		fmt.Fprintf(bw, "marker: REMOVED by this verify: a forward link has no reverse link; GC deletes no blob until the database is whole again\n")
	case r.MarkerWritten:
		fmt.Fprintf(bw, "marker: written by this verify --repair: complete since %s\n", r.CompleteSince.Format(time.RFC3339))
	case r.CompleteSince != nil:
		fmt.Fprintf(bw, "marker: complete since %s\n", r.CompleteSince.Format(time.RFC3339))
	default:
		fmt.Fprintf(bw, "marker: absent (the link database is not known to be complete; GC deletes no blob)\n")
	}
	if r.Repair {
		fmt.Fprintf(bw, "repair: %d missing reverse links written\n", r.ReverseRepaired)
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
	for _, a := range r.actions() {
		fmt.Fprintf(bw, "  - %s\n", a)
	}
	return bw.err
}

func verdict(code int) string {
	switch code {
	case ExitClean:
		return "clean"
	case ExitLeaks:
		return "leaks only"
	case ExitDataLoss:
		return "DATA-LOSS RISK or damage"
	case ExitBroken:
		return "broken links or tags: already broken (not a risk GC adds; the link database is sound)"
	default:
		return "incomplete: some parts could not be read"
	}
}

// actions says, for each kind found, what fixes it: one step per kind, and
// never "run X, then verify again" for what X cannot repair.
func (r *Report) actions() []string {
	c := r.Counts
	var out []string
	if r.Repair && r.ReverseRepaired > 0 {
		out = append(out, fmt.Sprintf("missing_reverse: %d written; nothing more to do for them", r.ReverseRepaired))
	}
	if c[MissingReverse] > 0 {
		what := "run `registry linkdb verify --repair`: it writes them and, with nothing else wrong, marks the database complete again"
		if r.Repair {
			what = "some could not be written (see their detail); fix the cause and run `registry linkdb verify --repair` again"
		}
		if r.MarkerRemoved {
			what = "the marker is removed, so GC deletes no blob meanwhile; " + what
		}
		out = append(out, "missing_reverse: "+what+"; find the writer that bypassed the middleware")
	}
	if c[MissingReferrer] > 0 {
		out = append(out, "missing_referrer: `registry linkdb rebuild` adds them")
	}
	for _, k := range []Kind{Corrupt, BrokenForward, DanglingTag} {
		if c[k] > 0 {
			out = append(out, k.String()+": "+k.Remedy())
		}
	}
	if c[Unreadable] > 0 {
		out = append(out, "unreadable: fix access to what is listed and run verify again; what is below it was not checked")
	}
	if c[StaleReverse]+c[StaleReferrer] > 0 {
		out = append(out, "stale_reverse, stale_referrer: leaks, safe to leave; `registry linkdb rebuild` removes them")
	}
	return out
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
