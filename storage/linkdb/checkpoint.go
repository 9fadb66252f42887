package linkdb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"

	"github.com/reclaim-registry/reclaim/internal/pause"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// checkpointPath is where StorageCheckpoint keeps a rebuild's progress, at
// the driver root next to the marker, outside Distribution's tree.
const checkpointPath = "/reclaim/rebuild/checkpoint"

// Checkpoint is a rebuild's progress: which repositories and blob shards
// are finished. A restarted rebuild skips them and keeps the original start
// time, which is what it records as "complete since".
type Checkpoint struct {
	Version      int       `json:"version"`
	Started      time.Time `json:"started"`
	Repositories []string  `json:"repositories_done"`
	Shards       []string  `json:"shards_done"`
}

const checkpointVersion = 1

// ErrBadCheckpoint means a checkpoint exists but cannot be used. Rebuild
// stops rather than guess: --restart starts over.
var ErrBadCheckpoint = errors.New("linkdb: unreadable checkpoint (use --restart to start over)")

// CheckpointStore keeps a Checkpoint between runs.
type CheckpointStore interface {
	// Load returns nil, nil when there is no checkpoint.
	Load(ctx context.Context) (*Checkpoint, error)
	Save(ctx context.Context, c *Checkpoint) error
	Clear(ctx context.Context) error
}

// StorageCheckpoint keeps the checkpoint in the registry storage, under
// reclaim/rebuild/checkpoint, so a rebuild restarted on another machine
// resumes too.
func StorageCheckpoint(d storagedriver.StorageDriver) CheckpointStore {
	return jsonCheckpoint{storageFile{d}}
}

// FileCheckpoint keeps the checkpoint in a local file (--checkpoint).
func FileCheckpoint(path string) CheckpointStore { return jsonCheckpoint{localFile(path)} }

// checkpointFile is where a jsonCheckpoint keeps its bytes. read returns
// found false when there is none; remove of none is no error.
type checkpointFile interface {
	read(ctx context.Context) (b []byte, found bool, err error)
	write(ctx context.Context, b []byte) error
	remove(ctx context.Context) error
}

type jsonCheckpoint struct{ f checkpointFile }

func (s jsonCheckpoint) Load(ctx context.Context) (*Checkpoint, error) {
	b, found, err := s.f.read(ctx)
	if err != nil {
		return nil, fmt.Errorf("read checkpoint: %w", err)
	}
	if !found {
		return nil, nil
	}
	var c Checkpoint
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadCheckpoint, err)
	}
	if c.Version != checkpointVersion || c.Started.IsZero() {
		return nil, fmt.Errorf("%w: version %d, started %v", ErrBadCheckpoint, c.Version, c.Started)
	}
	return &c, nil
}

func (s jsonCheckpoint) Save(ctx context.Context, c *Checkpoint) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	return s.f.write(ctx, b)
}

func (s jsonCheckpoint) Clear(ctx context.Context) error { return s.f.remove(ctx) }

type storageFile struct{ d storagedriver.StorageDriver }

func (s storageFile) read(ctx context.Context) ([]byte, bool, error) {
	b, err := s.d.GetContent(ctx, checkpointPath)
	if layout.IsNotFound(err) {
		return nil, false, nil
	}
	return b, err == nil, err
}

func (s storageFile) write(ctx context.Context, b []byte) error {
	return s.d.PutContent(ctx, checkpointPath, b)
}

func (s storageFile) remove(ctx context.Context) error {
	if err := s.d.Delete(ctx, checkpointPath); !layout.IsNotFound(err) {
		return err
	}
	return nil
}

type localFile string

func (f localFile) read(context.Context) ([]byte, bool, error) {
	b, err := os.ReadFile(string(f))
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	return b, err == nil, err
}

// write writes a temporary file, then renames it: a crash mid-write leaves
// the previous checkpoint.
func (f localFile) write(_ context.Context, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(string(f)), ".checkpoint-*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), string(f))
}

func (f localFile) remove(context.Context) error {
	if err := os.Remove(string(f)); !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// resume loads the checkpoint (discarding it first on Restart) and skips
// what it records as finished.
func (r *rebuild) resume(ctx context.Context) error {
	cp := r.opts.Checkpoint
	if cp == nil {
		return nil
	}
	if r.opts.Restart {
		if err := cp.Clear(ctx); err != nil {
			return fmt.Errorf("clear checkpoint: %w", err)
		}
	}
	c, err := cp.Load(ctx)
	if err != nil || c == nil {
		return err
	}
	// Keep the first run's start: repositories it finished were covered
	// from then on by the middleware.
	r.res.Started, r.res.Resumed = c.Started, true
	for _, s := range c.Repositories {
		r.doneRepos[s] = true
	}
	for _, s := range c.Shards {
		r.doneShards[s] = true
	}
	return nil
}

func (r *rebuild) saveCheckpoint(ctx context.Context) {
	cp := r.opts.Checkpoint
	if cp == nil {
		return
	}
	r.mu.Lock()
	c := &Checkpoint{Version: checkpointVersion, Started: r.res.Started}
	for s := range r.doneRepos {
		c.Repositories = append(c.Repositories, s)
	}
	for s := range r.doneShards {
		c.Shards = append(c.Shards, s)
	}
	r.mu.Unlock()
	sort.Strings(c.Repositories)
	sort.Strings(c.Shards)
	// A resumed rebuild skips the repositories c lists, so their reverse
	// links must be durable before c is: every one was put before the
	// snapshot above, so before this barrier. Without it, no save.
	if err := r.w.barrier(ctx); err != nil {
		return
	}
	// best effort: a failed save costs redoing work, never correctness
	_ = cp.Save(ctx, c)
}

// finishCheckpoint saves the checkpoint when part of the work failed (a
// rerun retries only that part) and clears it otherwise.
func (r *rebuild) finishCheckpoint(ctx context.Context, failed bool) error {
	cp := r.opts.Checkpoint
	switch {
	case failed:
		r.saveCheckpoint(ctx)
	case cp != nil:
		if err := cp.Clear(ctx); err != nil {
			return fmt.Errorf("clear checkpoint: %w", err)
		}
	}
	return nil
}

// checkpointer saves the checkpoint every CheckpointEvery until stop.
func (r *rebuild) checkpointer(ctx context.Context) (stop func()) {
	if r.opts.Checkpoint == nil {
		return func() {}
	}
	return pause.EveryInBackground(ctx, r.opts.CheckpointEvery, func() { r.saveCheckpoint(ctx) })
}
