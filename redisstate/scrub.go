package redisstate

import (
	"context"
	"fmt"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/redis/go-redis/v9"
)

// ScrubCursor is where the reclaimer's scrub stands in the catalog
// (gc/reclaimer/scrub.go), shared by every instance so that together
// they walk the registry once, not once each:
//
//	reclaim:scrub:cursor   the last repository name a scrub looked at ("" or absent: the start)
//
// It is a walkCursor (cursor.go), like the usage refresh's
// (reclaim:usage:cursor): one key, one GET and one SET per tick.
type ScrubCursor struct{ cur walkCursor }

// NewScrubCursor returns the scrub cursor under prefix (default "reclaim:").
func NewScrubCursor(c redis.UniversalClient, prefix string) *ScrubCursor {
	return &ScrubCursor{walkCursor{c, orDefaultPrefix(prefix) + "scrub:cursor"}}
}

// ScrubCursor is where the walk stands ("" at its start).
func (s *ScrubCursor) ScrubCursor(ctx context.Context) (string, error) {
	c, err := s.cur.get(ctx)
	if err != nil {
		return "", fmt.Errorf("%w: scrub cursor: %v", reclaim.ErrTrackerUnavailable, err)
	}
	return c, nil
}

// SetScrubCursor moves the walk.
func (s *ScrubCursor) SetScrubCursor(ctx context.Context, cursor string) error {
	if err := s.cur.set(ctx, cursor); err != nil {
		return fmt.Errorf("%w: set scrub cursor: %v", reclaim.ErrTrackerUnavailable, err)
	}
	return nil
}
