package middleware

import (
	"context"
	"testing"

	"github.com/distribution/distribution/v3/registry/storage/driver/inmemory"

	"github.com/reclaim-registry/reclaim/internal/config"
)

// The embedded default is noeviction and restarts with the process: its
// health reads clean and its epoch is set.
func TestEmbeddedRedisHealth(t *testing.T) {
	ctx := context.Background()
	e, err := NewEnv(ctx, inmemory.New(), config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := e.Tracker.StartRecording(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Tracker.RecordingSince(ctx); err != nil {
		t.Fatalf("embedded epoch: %v", err)
	}
	if h := e.Tracker.RedisHealth(); !h.Embedded || h.Evicts || h.MaxmemoryPolicy != "noeviction" || h.Error != "" {
		t.Fatalf("embedded health: %+v", h)
	}
}
