package linkdb

import (
	"context"
	"fmt"
	"strings"
	"time"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"

	"github.com/reclaim-registry/reclaim/storage/layout"
)

// markerPath records that the reverse-link database is complete: every
// forward link written since the given time, and every one that existed
// before it, has its reverse link. It lives in the storage itself (outside
// Distribution's tree) so it survives the loss of Redis.
const markerPath = "/reclaim/linkdb-complete"

// LinkDBComplete returns the time since which the reverse-link database is
// known complete. ok is false when no rebuild has ever finished; GC must then
// delete nothing that depends on reverse links.
func LinkDBComplete(ctx context.Context, d storagedriver.StorageDriver) (since time.Time, ok bool, err error) {
	b, err := d.GetContent(ctx, markerPath)
	if layout.IsNotFound(err) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("read %s: %w", markerPath, err)
	}
	since, err = time.Parse(time.RFC3339Nano, strings.TrimSpace(string(b)))
	if err != nil {
		// fail closed: an unreadable marker is not a complete database
		return time.Time{}, false, fmt.Errorf("parse %s: %w", markerPath, err)
	}
	return since, true, nil
}

// MarkLinkDBComplete records that the reverse-link database is complete
// since the given time (the start of the rebuild that just finished).
func MarkLinkDBComplete(ctx context.Context, d storagedriver.StorageDriver, since time.Time) error {
	if err := d.PutContent(ctx, markerPath, []byte(since.UTC().Format(time.RFC3339Nano)+"\n")); err != nil {
		return fmt.Errorf("write %s: %w", markerPath, err)
	}
	return nil
}

// MarkCompleteIfEmpty records the link database as complete, since now, when
// the storage holds no repository yet: from the first push on, the
// middleware writes every reverse link before its forward link, so there is
// no past for a rebuild to cover. A storage that already holds repositories
// is left alone (it needs `registry linkdb rebuild`), and so is an unreadable
// or corrupt marker: fail closed, never overwrite what we cannot read.
//
// This is only true if every writer of the storage runs the middleware; an
// upstream registry still serving the same storage would write links without
// reverse links (docs/operations.md).
func MarkCompleteIfEmpty(ctx context.Context, d storagedriver.StorageDriver) (marked bool, err error) {
	if _, ok, err := LinkDBComplete(ctx, d); err != nil || ok {
		return false, err
	}
	repos, err := d.List(ctx, layout.RepositoriesRoot)
	switch {
	case layout.IsNotFound(err):
	case err != nil:
		return false, fmt.Errorf("list %s: %w", layout.RepositoriesRoot, err)
	case len(repos) > 0:
		return false, nil
	}
	if err := MarkLinkDBComplete(ctx, d, time.Now()); err != nil {
		return false, err
	}
	return true, nil
}

// MarkLinkDBIncomplete removes the marker: the reverse-link database is
// known to miss a link that could not be written back, so no blob may be
// deleted on the strength of it until a rebuild (or `linkdb verify
// --repair`) has covered every forward link again. A marker already gone
// counts as removed.
func MarkLinkDBIncomplete(ctx context.Context, d storagedriver.StorageDriver) error {
	if err := d.Delete(ctx, markerPath); err != nil && !layout.IsNotFound(err) {
		return fmt.Errorf("remove %s: %w", markerPath, err)
	}
	return nil
}
