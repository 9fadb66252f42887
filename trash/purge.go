package trash

import (
	"context"
	"fmt"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/gc"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/reclaim/trashentry"
)

// Purger deletes a blob's data for good once nothing links or holds it,
// behind the blob's GC fence and after a re-check (gc/collector's
// Orphans.Purge): purge never deletes data itself.
type Purger interface {
	Purge(ctx context.Context, blob digest.Digest) (gc.Decision, []gc.Decision)
}

// Purged is what a purge did with one entry.
type Purged struct {
	Entry trashentry.Entry `json:"entry"`
	// Blob is the decision on the entry's blob after its hold went:
	// deleted (its data freed), or kept with the reason (another link or
	// hold, an access within the window, a failed check).
	Blob *gc.Decision `json:"blob,omitempty"`
	// Errors are failures beside the blob's decision (its fence not
	// released, a descriptor cache not evicted).
	Errors []gc.Decision `json:"errors,omitempty"`
	// Error is set when the hold could not be removed: the entry stays.
	Error string `json:"error,omitempty"`
}

// PurgeReport is one purge.
type PurgeReport struct {
	Entries    []Purged `json:"entries"`
	BytesFreed int64    `json:"bytes_freed"`
	BlobsFreed int      `json:"blobs_freed"`
}

// Freed is the blobs whose data the purge deleted, in the order it
// purged them: what deletion events tell (no trash entry: the delete is
// final). An entry whose blob stayed (another link or hold, an access
// within the window) is not among them.
func (r PurgeReport) Freed() []reclaim.Deletion {
	var out []reclaim.Deletion
	for _, p := range r.Entries {
		if p.Blob != nil && p.Blob.Deleted() {
			out = append(out, reclaim.Deletion{Kind: reclaim.KindBlob, Digest: p.Blob.Digest, Size: p.Blob.Size, Reason: p.Blob.Reason.String()})
		}
	}
	return out
}

// PurgeExpired purges up to max entries whose expiry has passed at now,
// oldest expiry first (the reclaimer's tick, bounded per tick).
func (b *Bin) PurgeExpired(ctx context.Context, p Purger, now time.Time, max int) (PurgeReport, error) {
	due, err := b.idx.due(ctx, now, max)
	if err != nil {
		return PurgeReport{}, fmt.Errorf("trash: list expired entries: %w", err)
	}
	return b.purge(ctx, p, due, func(e trashentry.Entry) bool { return !e.Expires.After(now) }), nil
}

// PurgeRemovedBefore purges up to max entries removed before t, whatever
// their expiry (`registry trash purge --older-than`: space now).
func (b *Bin) PurgeRemovedBefore(ctx context.Context, p Purger, t time.Time, max int) (PurgeReport, error) {
	entries, err := b.List(ctx, Filter{Until: t})
	if err != nil {
		return PurgeReport{}, fmt.Errorf("trash: list entries: %w", err)
	}
	if len(entries) > max {
		entries = entries[len(entries)-max:] // List is newest first: the oldest
	}
	return b.purge(ctx, p, entries, func(e trashentry.Entry) bool { return e.Removed.Before(t) }), nil
}

// purge removes each entry's hold, as its record in storage says (the
// index may be stale: a hold rewritten or gone), then asks p to delete
// the blob's data, which it does only when nothing else keeps it.
func (b *Bin) purge(ctx context.Context, p Purger, entries []trashentry.Entry, due func(trashentry.Entry) bool) PurgeReport {
	rep := PurgeReport{Entries: []Purged{}}
	for _, e := range entries {
		if ctx.Err() != nil {
			break
		}
		r := Purged{Entry: e}
		stored, ok, err := b.read(ctx, e.Digest, e.ID)
		switch {
		case err != nil:
			r.Error = err.Error()
		case ok && !due(stored):
			r.Error = "its hold in storage is not due: left"
		default:
			if err := b.Drop(ctx, e); err != nil {
				r.Error = err.Error()
				break
			}
			dec, errs := p.Purge(ctx, e.Digest)
			r.Blob, r.Errors = &dec, errs
			if dec.Deleted() {
				rep.BytesFreed += r.Blob.Size
				rep.BlobsFreed++
			}
		}
		rep.Entries = append(rep.Entries, r)
	}
	return rep
}
