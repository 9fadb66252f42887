package console

import (
	"fmt"
	"html/template"
	"sort"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/gc"
	"github.com/reclaim-registry/reclaim/gc/collector"
	"github.com/reclaim-registry/reclaim/gc/reclaimer"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/reclaim/gcrun"
)

// Overview is the state the overview page shows, read by the registry from
// what GET /gc/v1/status reports.
type Overview struct {
	// Notes are whole-registry remarks ("the reclaim middleware is not
	// configured"), shown first.
	Notes         []string
	GCEnabled     bool
	GCNote        string // why the GC API is off
	WindowSeconds int64
	Redis         RedisState
	LinkDB        LinkDBState
	Reclaimer     reclaimer.Status // Enabled false when off
	ReclaimerNote string
	// EstimatesOff says why this instance refreshes no usage estimates
	// (the reclaimer is off, or its usagerefresh is 0); empty when it does.
	EstimatesOff string
	Freed        FreedState
}

// FreedState is what GC (collects and the reclaimer) deleted on every
// instance today and in the last 7 days (UTC days), from Redis's daily sums.
type FreedState struct {
	OK          bool
	Error       string
	Today, Week FreedSum
}

// FreedSum is a sum of deletions.
type FreedSum struct {
	Bytes, Objects, Runs int64
}

// RedisState is Redis as the tracker last saw it.
type RedisState struct {
	OK             bool
	Error          string
	Embedded       bool
	RecordingSince time.Time
	Trusted        bool // recorded for a full window: GC may trust absent records
	Epoch          time.Time
	Policy         string // maxmemory-policy
	Evicts         bool
	Persistence    string
	Masters        int
	LastLoss       string // "restart" and so on; empty when never
	LastLossAt     time.Time
	LastLossDetail string
}

// LinkDBState is whether the reverse-link database is known complete.
type LinkDBState struct {
	Complete bool
	Since    time.Time
	Error    string
}

// RetentionRow is one retention plan, for the retention page, or a
// preview an abort stopped (Status "aborted", no ID: it stored no plan).
type RetentionRow struct {
	ID, Repository string
	Policy         string
	Status         string // ready, skipped or aborted (Skip says why)
	Skip           string
	Keep           int // versions kept
	Delete         int // candidate tags an apply would delete
	Updated        time.Time
	Applies        []RetentionApply // oldest first; none: never applied
}

// RetentionApply is what one apply of a plan did.
type RetentionApply struct {
	Started, Finished time.Time
	Deleted           int      // tags deleted
	Left              []string // the reason of each candidate tag left
	Aborted           string   // why the apply stopped before the end ("reason: detail")
	// IndexNote says the in-use index changed since the plan, and what
	// that meant for the run ("": it did not).
	IndexNote string
}

// tally counts reasons: "reason: n", most frequent first, then by reason.
func tally(reasons []string) []string {
	n := map[string]int{}
	for _, r := range reasons {
		n[r]++
	}
	keys := make([]string, 0, len(n))
	for r := range n {
		keys = append(keys, r)
	}
	sort.Slice(keys, func(i, j int) bool {
		if n[keys[i]] != n[keys[j]] {
			return n[keys[i]] > n[keys[j]]
		}
		return keys[i] < keys[j]
	})
	out := make([]string, len(keys))
	for i, r := range keys {
		out[i] = fmt.Sprintf("%s: %d", r, n[r])
	}
	return out
}

// runRow is one run in a list.
type runRow struct {
	ID, Repository, Abort    string
	Status                   gcrun.Status
	DryRun                   bool
	Started                  time.Time
	DurationMS               int64
	Manifests, Layers, Blobs int
	BytesFreed               int64
	// What the run moved to the trash (trash.keep > 0): gone from the
	// registry, its bytes held, not freed, until RestorableUntil at least.
	BlobsInTrash    int
	BytesInTrash    int64
	RestorableUntil *time.Time
	Errors          int
	FirstError      string
	DiedIn          string // the step an interrupted run died in
	// Blockers are the preconditions a real run found, or a dry run would
	// have found, not holding: a blocked dry run did no harm, but a real
	// run now would be refused (Blocks "run") or delete no blob ("blobs").
	Blockers  []blockerRow
	BlocksRun bool // a blocker is run-wide: a real run would have been refused
}

// blockerRow is one precondition that did not hold, as
// `registry gc collect --dry-run` prints it: "blocked (run): reason until
// time: detail".
type blockerRow struct {
	Blocks, Reason, Detail string
	Until                  *time.Time
}

func rowOf(r *collector.Report) runRow {
	row := runRow{ID: r.RunID, Repository: r.Repository, Status: r.Status, Abort: r.Abort, DryRun: r.DryRun,
		Started: r.StartedAt, Manifests: len(r.ManifestsDeleted), Layers: len(r.LayersUnlinked),
		Blobs: len(r.BlobsDeleted), BytesFreed: r.BytesFreed, Errors: len(r.Errors),
		BlobsInTrash: len(r.BlobsInTrash), BytesInTrash: r.BytesInTrash, RestorableUntil: r.RestorableUntil}
	for _, b := range r.Blockers {
		row.Blockers = append(row.Blockers, blockerRow{Blocks: b.Blocks, Reason: fmt.Sprint(b.Reason), Detail: b.Detail, Until: b.Until})
		row.BlocksRun = row.BlocksRun || b.Blocks == collector.BlocksRun
	}
	if r.Interruption != nil {
		row.DiedIn = string(r.Interruption.Step)
	}
	if !r.FinishedAt.IsZero() {
		row.DurationMS = r.FinishedAt.Sub(r.StartedAt).Milliseconds()
	}
	if len(r.Errors) > 0 {
		// An abort's error repeats its reason: "gc: aborted (reason): why".
		row.FirstError = r.Errors[0].Detail
		if r.Abort != "" {
			row.FirstError = strings.TrimPrefix(row.FirstError, "gc: aborted ("+r.Abort+"): ")
		}
	}
	return row
}

// refused is a run that a precondition stopped, a dry run that one would
// have stopped, one that failed, or one whose process died (interrupted):
// each needs a look.
func (r runRow) refused() bool {
	return r.Status == gcrun.StatusAborted || r.Status == gcrun.StatusFailed ||
		r.Status == gcrun.StatusInterrupted || r.DryRun && r.BlocksRun
}

// totals sums what real runs finished since a time deleted.
type totals struct {
	Deleted      int
	BytesFreed   int64
	BytesInTrash int64 // moved to the trash: held, not freed
	Runs         int
}

func sumSince(runs []*collector.Report, since time.Time) totals {
	var t totals
	for _, r := range runs {
		if r.DryRun || r.Status == gcrun.StatusAborted || r.FinishedAt.Before(since) || r.FinishedAt.IsZero() {
			continue
		}
		t.Runs++
		t.Deleted += len(r.ManifestsDeleted) + len(r.LayersUnlinked) + len(r.BlobsDeleted)
		t.BytesFreed += r.BytesFreed
		t.BytesInTrash += r.BytesInTrash
	}
	return t
}

// planRow is one object of a run: what was (or would be) done and why.
type planRow struct {
	Kind, Reason, Message, Detail string
	Trash                         string // the trash entry that holds what was deleted
	Digest                        digest.Digest
	Deletes                       bool
	Size                          int64
	LastAccess                    *time.Time
}

func planRows(decs []gc.Decision) []planRow {
	rows := make([]planRow, 0, len(decs))
	for _, d := range decs {
		rows = append(rows, planRow{Kind: string(d.Kind), Reason: d.Reason.String(), Message: d.Reason.Message(),
			Detail: d.Detail, Digest: d.Digest, Deletes: d.Deleted(), Size: d.Size, LastAccess: d.LastAccess, Trash: d.Trash})
	}
	return rows
}

// reasonCount is how many objects a run decided for one reason.
type reasonCount struct {
	Reason  string
	Deletes bool
	N       int
}

func countReasons(rows []planRow) []reasonCount {
	var out []reasonCount
	idx := map[string]int{}
	for _, r := range rows {
		i, ok := idx[r.Reason]
		if !ok {
			i = len(out)
			idx[r.Reason] = i
			out = append(out, reasonCount{Reason: r.Reason, Deletes: r.Deletes})
		}
		out[i].N++
	}
	return out
}

// ranking is the repositories ranked by their usage estimates, as the
// overview's card and the repositories page show them.
type ranking struct {
	Available bool
	By        string
	Rows      []reclaim.Usage
	Ranked    int64
	Sum       int64 // of the rows' reclaimable (or exclusive) bytes
	Error     string
}

func rankingOf(rows []reclaim.Usage, ranked int64, by string, err error) ranking {
	r := ranking{Available: true, By: by, Rows: rows, Ranked: ranked}
	if err != nil {
		r.Error = err.Error()
	}
	for _, u := range rows {
		if by == "exclusive" {
			r.Sum += u.ExclusiveBytes
		} else {
			r.Sum += u.ReclaimableBytes
		}
	}
	return r
}

// The template functions.
var funcs = template.FuncMap{
	"bytes":  humanBytes,
	"floor":  floorBytes,
	"ms":     humanMS,
	"when":   func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") },
	"ago":    ago,
	"prefix": func() string { return Prefix },
	"plural": plural,
	"tally":  tally,
}

// plural is n and the noun, in the plural unless n is 1: "1 tag", "2 tags",
// "0 blobs", "2 repositories". n is any integer.
func plural(n any, noun string) string {
	s := fmt.Sprint(n)
	switch {
	case s == "1":
		return s + " " + noun
	case strings.HasSuffix(noun, "y"):
		return s + " " + strings.TrimSuffix(noun, "y") + "ies"
	}
	return s + " " + noun + "s"
}

// binaryUnit is the largest power of 1024 not above n (n >= 1024) and its
// prefix letter.
func binaryUnit(n int64) (div int64, prefix byte) {
	div, exp := int64(1024), 0
	for m := n / 1024; m >= 1024; m /= 1024 {
		div *= 1024
		exp++
	}
	return div, "KMGTPE"[exp]
}

func humanBytes(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	div, p := binaryUnit(n)
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), p)
}

// floorBytes is humanBytes rounded down, never up: "will free" must not
// overstate (1023 bytes short of 2 KiB is 1.9 KiB, not 2.0).
func floorBytes(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	div, p := binaryUnit(n)
	tenths := n * 10 / div
	return fmt.Sprintf("%d.%d %ciB", tenths/10, tenths%10, p)
}

func humanMS(ms int64) string {
	if ms < 1000 {
		return fmt.Sprintf("%d ms", ms)
	}
	return (time.Duration(ms) * time.Millisecond).Round(100 * time.Millisecond).String()
}

func ago(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := time.Since(t)
	if d < 0 {
		return "just now"
	}
	return d.Round(time.Second).String() + " ago"
}
