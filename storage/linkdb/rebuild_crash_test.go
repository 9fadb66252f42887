package linkdb

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
	"github.com/distribution/distribution/v3/registry/storage/driver/inmemory"

	"github.com/reclaim-registry/reclaim/storage/layout"
)

var errKilled = errors.New("test: the process was killed")

// crashWriter wraps a rebuild's link writer and plays kill -9 followed by
// a power loss. It counts steps (a link put, a barrier, a write through
// crashDriver); at step crashAt the process "dies": no later write reaches
// the storage, and drop then undoes every link put since the last barrier
// that returned, as a power loss would lose what was never made durable.
type crashWriter struct {
	inner linkWriter
	raw   storagedriver.StorageDriver // to read what a path held, and to undo

	mu      sync.Mutex
	steps   int
	crashAt int // 0: never
	killed  bool
	onKill  func()
	seq     int
	pending map[string]undo // put since the last barrier: not durable
}

type undo struct {
	prev    []byte
	existed bool
	seq     int
}

// step counts one step and says whether the process is dead by now. The
// caller holds w.mu.
func (w *crashWriter) step() bool {
	if w.killed {
		return true
	}
	w.steps++
	if w.steps == w.crashAt {
		w.killed = true
		w.onKill()
	}
	return w.killed
}

func (w *crashWriter) put(ctx context.Context, path string, content []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.step() {
		return errKilled
	}
	u, ok := w.pending[path]
	if !ok {
		prev, err := w.raw.GetContent(ctx, path)
		u = undo{prev: prev, existed: err == nil}
	}
	w.seq++
	u.seq = w.seq
	w.pending[path] = u
	return w.inner.put(ctx, path, content)
}

// barrier makes durable what was put before it began, if the process
// lives until it returns.
func (w *crashWriter) barrier(ctx context.Context) error {
	w.mu.Lock()
	if w.step() {
		w.mu.Unlock()
		return errKilled
	}
	upTo := w.seq
	w.mu.Unlock()
	if err := w.inner.barrier(ctx); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.killed {
		return errKilled
	}
	for p, u := range w.pending {
		if u.seq <= upTo {
			delete(w.pending, p)
		}
	}
	return nil
}

func (w *crashWriter) close() error { return w.inner.close() }

// undurable says whether a link of repo was put and not made durable yet.
func (w *crashWriter) undurable(repo string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for p := range w.pending {
		if layout.Classify(p).Repo == repo {
			return true
		}
	}
	return false
}

// drop is the power loss after the kill: it undoes every put not made
// durable, and returns how many.
func (w *crashWriter) drop(t *testing.T) int {
	t.Helper()
	ctx := context.Background()
	for p, u := range w.pending {
		var err error
		if u.existed {
			err = w.raw.PutContent(ctx, p, u.prev)
		} else {
			err = w.raw.Delete(ctx, p)
		}
		if err != nil {
			t.Fatalf("drop %s: %v", p, err)
		}
	}
	return len(w.pending)
}

// crashDriver is the driver the rebuild is given: it refuses every write
// once the process is dead, counts each write as a step, and checks, when
// the checkpoint or the marker is written, that what they cover is durable.
type crashDriver struct {
	storagedriver.StorageDriver
	w *crashWriter
	t *testing.T

	checkpoints atomic.Int64 // saved listing at least one repository
	markers     atomic.Int64
}

func (d *crashDriver) PutContent(ctx context.Context, path string, content []byte) error {
	d.w.mu.Lock()
	dead := d.w.step()
	d.w.mu.Unlock()
	if dead {
		return errKilled
	}
	switch path {
	case checkpointPath:
		var c Checkpoint
		if err := json.Unmarshal(content, &c); err != nil {
			d.t.Errorf("checkpoint: %v", err)
		}
		for _, repo := range c.Repositories {
			if d.w.undurable(repo) {
				d.t.Errorf("the checkpoint lists %s before its reverse links are durable", repo)
			}
		}
		if len(c.Repositories) > 0 {
			d.checkpoints.Add(1)
		}
	case markerPath:
		d.w.mu.Lock()
		if n := len(d.w.pending); n > 0 {
			d.t.Errorf("the marker is written while %d reverse links are not durable", n)
		}
		d.w.mu.Unlock()
		d.markers.Add(1)
	}
	return d.StorageDriver.PutContent(ctx, path, content)
}

func (d *crashDriver) dead() bool {
	d.w.mu.Lock()
	defer d.w.mu.Unlock()
	return d.w.killed
}

func (d *crashDriver) Delete(ctx context.Context, path string) error {
	if d.dead() {
		return errKilled
	}
	return d.StorageDriver.Delete(ctx, path)
}

func (d *crashDriver) Move(ctx context.Context, src, dst string) error {
	if d.dead() {
		return errKilled
	}
	return d.StorageDriver.Move(ctx, src, dst)
}

func (d *crashDriver) Writer(ctx context.Context, path string, append bool) (storagedriver.FileWriter, error) {
	if d.dead() {
		return nil, errKilled
	}
	return d.StorageDriver.Writer(ctx, path, append)
}

// TestRebuildKilledAtRandomPoints kills rebuilds at random steps (a link
// written, a barrier, a checkpoint or marker write), drops what was not
// durable, and resumes until a run finishes: verify then finds every link,
// and no checkpoint or marker was ever written before what it covers was
// durable. On the filesystem the writer inside is the real one (syncfs).
func TestRebuildKilledAtRandomPoints(t *testing.T) {
	for _, drv := range []string{"inmemory", "filesystem"} {
		t.Run(drv, func(t *testing.T) {
			seeds := 16
			if drv == "filesystem" {
				seeds = 4
			}
			var crashes, dropped int
			var checkpoints, markers int64
			for seed := range seeds {
				rng := rand.New(rand.NewPCG(uint64(seed), 29))
				var raw storagedriver.StorageDriver = inmemory.New()
				root := ""
				if drv == "filesystem" {
					root = t.TempDir()
					raw = filesystem.New(filesystem.DriverParameters{RootDirectory: root, MaxThreads: 100})
				}
				st := generate(t, raw, small)
				for run := 0; ; run++ {
					ctx, cancel := context.WithCancel(context.Background())
					w := &crashWriter{raw: raw, pending: map[string]undo{}, onKill: cancel}
					if run < 5 {
						// a put per link, a barrier and a checkpoint per repository
						w.crashAt = 1 + rng.IntN(int(st.Links())+2*small.Repos)
					}
					d := &crashDriver{StorageDriver: raw, w: w, t: t}
					res, err := Rebuild(ctx, d, RebuildOptions{Workers: 3, Checkpoint: StorageCheckpoint(d),
						FilesystemRoot: root, saveEach: rng.IntN(3) > 0, // else the marker's barrier is alone
						wrapWriter: func(in linkWriter) linkWriter {
							if _, ok := in.(driverWriter); ok {
								in = driverWriter{raw} // d counts the writes w passes on
							}
							w.inner = in
							return w
						}})
					cancel()
					checkpoints += d.checkpoints.Load()
					markers += d.markers.Load()
					if w.killed {
						crashes++
						dropped += w.drop(t)
						continue
					}
					if err != nil || !res.Complete {
						t.Fatalf("seed %d run %d: complete %v, %v", seed, run, res != nil && res.Complete, err)
					}
					break
				}
				rep := verify(t, raw)
				if rep.ExitCode != ExitClean || rep.ForwardLinks != st.Links() || rep.ReverseLinks != st.Links() {
					t.Fatalf("seed %d: verify exit %d %+v, forward %d reverse %d, generated %d",
						seed, rep.ExitCode, rep.Counts, rep.ForwardLinks, rep.ReverseLinks, st.Links())
				}
			}
			t.Logf("%d kills, %d links lost and written again, %d checkpoints, %d markers", crashes, dropped, checkpoints, markers)
			if crashes == 0 || dropped == 0 || checkpoints == 0 {
				t.Errorf("the test exercised nothing: %d kills, %d links lost, %d checkpoints", crashes, dropped, checkpoints)
			}
		})
	}
}
