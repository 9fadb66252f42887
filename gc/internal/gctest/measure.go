package gctest

import (
	"context"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/distribution/distribution/v3/registry/storage/driver/inmemory"

	"github.com/reclaim-registry/reclaim/internal/config"
	"github.com/reclaim-registry/reclaim/storage/middleware"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

// Measured is the storage work of one measured call.
type Measured struct {
	Calls   int
	Entries int64 // yielded by walks
	Stats   int64 // every Stat, the walks' own included
	Names   int64 // returned by every List, the walks' own included
	ByKind  string
	Wall    time.Duration
}

// Measure counts the storage calls of run below c and w.
func Measure(c *storagetest.CountingDriver, w *storagetest.WalkCounter, run func()) Measured {
	c.Reset()
	w.Reset()
	runtime.GC() // do not bill one measurement for the garbage of the previous
	start := time.Now()
	run()
	total, _ := c.Total()
	var kinds []string
	for k, n := range c.Counts() {
		kinds = append(kinds, fmt.Sprintf("%s=%d", k, n))
	}
	sort.Strings(kinds)
	return Measured{Calls: total, Entries: w.Entries.Load(), Stats: w.Stats.Load(), Names: w.Names.Load(),
		ByKind: strings.Join(kinds, " "), Wall: time.Since(start)}
}

// Steady is the round trips counted, less connection setup: each new
// pooled connection sends hello (and client setinfo) in a pipeline of its
// own, and how many the pool opens depends on the concurrency of the
// moment.
func Steady(c *storagetest.RedisCounter) int64 {
	cmds := c.Commands()
	return c.Count() - cmds["hello"] - cmds["client"] - min(cmds["pipeline"], cmds["hello"])
}

// MeasureRig is a registry of R filler repositories plus the target
// (Build), on counting drivers, under the reclaim middleware (Env).
// Access records come from Tracker; the middleware's own Redis is an
// embedded one.
type MeasureRig struct {
	Ctx      context.Context
	W        *storagetest.WalkCounter
	Counting *storagetest.CountingDriver
	Env      *middleware.Env
	Tracker  *Tracker
}

// NewMeasureRig builds the registry of Build(R, M) and the middleware
// over it.
func NewMeasureRig(t testing.TB, R, M int) *MeasureRig {
	mem := inmemory.New()
	r := &MeasureRig{Ctx: context.Background(), W: &storagetest.WalkCounter{StorageDriver: mem}, Tracker: NewTracker()}
	r.Counting = storagetest.NewCountingDriver(r.W)
	Build(&Store{T: t, D: mem}, R, M)
	// The reclaim middleware over the counting driver: deletes remove
	// reverse links (counted too).
	env, err := middleware.NewEnv(r.Ctx, r.Counting, config.Options{Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.Close() })
	r.Env = env
	return r
}

// Build writes R filler repositories and the target, with reverse links,
// as the middleware would have. Every repository shares a base layer; the
// target's untagged manifests also share an old base with every filler, so
// the collect unlinks a layer that R other repositories link and must ask
// whether anybody else does.
func Build(f *Store, R, M int) {
	base, oldBase := "shared-base-layer", "shared-old-base-layer"
	for r := range R {
		repo := fmt.Sprintf("filler/r%04d", r)
		for m := range 3 {
			img := f.Image(repo, nil, base, oldBase, fmt.Sprintf("%s-%d", repo, m))
			if m < 2 {
				f.Tag(repo, fmt.Sprint("v", m), img.Digest)
			}
		}
	}
	for m := range M {
		layers := []string{base, fmt.Sprintf("target-%d", m)}
		if m%2 == 1 {
			layers = append(layers, oldBase)
		}
		img := f.Image("target/app", nil, layers...)
		if m%2 == 0 {
			f.Tag("target/app", fmt.Sprint("v", m), img.Digest)
		}
	}
	f.WriteReverseLinks()
}
