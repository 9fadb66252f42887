package storage

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
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
	if errors.As(err, new(storagedriver.PathNotFoundError)) {
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
