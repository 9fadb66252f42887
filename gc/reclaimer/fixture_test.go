package reclaimer

import (
	"context"
	"testing"
	"time"

	"github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/gc/collector"
	"github.com/reclaim-registry/reclaim/gc/internal/gctest"
	"github.com/reclaim-registry/reclaim/internal/config"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/middleware"
)

// fakeTracker is gctest's tracker, fencing with the collector's Hold.
type fakeTracker struct{ *gctest.Tracker }

func (f fakeTracker) Fence(ctx context.Context, o reclaim.Object, window, lease time.Duration) (reclaim.Hold, error) {
	h, err := f.FenceHold(ctx, o, window, lease)
	if err != nil {
		return nil, err
	}
	return h, nil
}

// fixture is a collector on gctest's storage and tracker; cfg is its
// configuration, which reclaimer hands the reclaimer as well.
type fixture struct {
	*gctest.Store
	tr    fakeTracker
	usage *gctest.Usage // newUsageFixture's
	cfg   collector.Config
	c     *collector.Collector
}

func newFixture(t *testing.T, mod ...func(*collector.Config)) *fixture {
	t.Helper()
	f := &fixture{Store: &gctest.Store{T: t, D: inmemory.New()}, tr: fakeTracker{gctest.NewTracker()}}
	f.cfg = collector.Config{Driver: f.D, Tracker: f.tr, Links: gctest.ScanLinks{D: f.D},
		LinkDBComplete: func(context.Context) (bool, error) { return true, nil },
		Window:         time.Hour, Now: f.tr.Clock}
	for _, m := range mod {
		m(&f.cfg)
	}
	f.start()
	return f
}

// newUsageFixture is newFixture on the reclaim middleware (real reverse
// links) with an in-memory usage store.
func newUsageFixture(t *testing.T) *fixture {
	t.Helper()
	mem := inmemory.New()
	f := &fixture{Store: &gctest.Store{T: t, D: mem}, tr: fakeTracker{gctest.NewTracker()}}
	f.usage = gctest.NewUsage(f.tr.Clock)
	env, err := middleware.NewEnv(context.Background(), mem, config.Options{Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.Close() })
	f.cfg = collector.Config{Driver: env.Driver, Tracker: f.tr, Links: env.Links, Context: middleware.WithoutAccessRecords, Usage: f.usage,
		LinkDBComplete: func(context.Context) (bool, error) { return true, nil }, Window: time.Hour, Now: f.tr.Clock}
	f.start()
	return f
}

// start (re)builds the collector on f.cfg.
func (f *fixture) start() {
	c, err := collector.New(f.cfg)
	if err != nil {
		f.T.Fatal(err)
	}
	f.c = c
}

// reclaimer builds a reclaimer on f's collector and q, wired to what the
// collector is wired to, as the registry wires them.
func (f *fixture) reclaimer(q Queue, cfg Config) (*Reclaimer, error) {
	cfg.Collector, cfg.Queue = f.c, q
	cfg.Driver, cfg.Context, cfg.Freed, cfg.Now = f.cfg.Driver, f.cfg.Context, f.cfg.Freed, f.cfg.Now
	cfg.Repair, cfg.MarkLinkDBIncomplete = f.cfg.Repair, f.cfg.MarkLinkDBIncomplete
	if f.usage != nil {
		cfg.Usage = f.usage
	}
	return New(cfg)
}

func newTestReclaimer(t *testing.T, f *fixture, q Queue, enabled bool) *Reclaimer {
	t.Helper()
	r, err := f.reclaimer(q, Config{Enabled: enabled, Interval: 10 * time.Millisecond, Batch: 10, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// queuedBlob stores a blob no repository links and queues it, due now.
func queuedBlob(f *fixture, content string) (*gctest.Queue, digest.Digest) {
	q := gctest.NewQueue(f.tr.Clock)
	b := f.Blob(content)
	q.Add(b.Digest, f.tr.Clock())
	return q, b.Digest
}
