package trash

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/reclaim/trashentry"
)

// Filter selects entries; zero fields select everything.
type Filter struct {
	Repo   string
	Tag    string
	Digest digest.Digest
	Run    string
	Plan   string
	Since  time.Time // removed at or after
	Until  time.Time // removed before
}

func (f Filter) match(e trashentry.Entry) bool {
	return (f.Repo == "" || e.Repo == f.Repo) && (f.Tag == "" || e.Tag == f.Tag) && (f.Digest == "" || e.Digest == f.Digest) &&
		(f.Run == "" || e.Run == f.Run) && (f.Plan == "" || e.Plan == f.Plan) &&
		(f.Since.IsZero() || !e.Removed.Before(f.Since)) && (f.Until.IsZero() || e.Removed.Before(f.Until))
}

// List returns the indexed entries f selects, newest first. It reads the
// whole index (its cost grows with the entries in the trash, not with the
// registry).
func (b *Bin) List(ctx context.Context, f Filter) ([]trashentry.Entry, error) {
	var out []trashentry.Entry
	err := b.idx.scan(ctx, func(e trashentry.Entry) error {
		if f.match(e) {
			out = append(out, e)
		}
		return nil
	})
	slices.SortFunc(out, func(a, b trashentry.Entry) int {
		if c := b.Removed.Compare(a.Removed); c != 0 {
			return c
		}
		return strings.Compare(b.ID, a.ID)
	})
	return out, err
}
