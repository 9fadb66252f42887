package linkdb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

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
func StorageCheckpoint(d storagedriver.StorageDriver) CheckpointStore { return storageCheckpoint{d} }

type storageCheckpoint struct{ d storagedriver.StorageDriver }

func (s storageCheckpoint) Load(ctx context.Context) (*Checkpoint, error) {
	b, err := s.d.GetContent(ctx, checkpointPath)
	if layout.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read checkpoint: %w", err)
	}
	return decodeCheckpoint(b)
}

func (s storageCheckpoint) Save(ctx context.Context, c *Checkpoint) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	return s.d.PutContent(ctx, checkpointPath, b)
}

func (s storageCheckpoint) Clear(ctx context.Context) error {
	err := s.d.Delete(ctx, checkpointPath)
	if layout.IsNotFound(err) {
		return nil
	}
	return err
}

// FileCheckpoint keeps the checkpoint in a local file (--checkpoint).
func FileCheckpoint(path string) CheckpointStore { return fileCheckpoint(path) }

type fileCheckpoint string

func (f fileCheckpoint) Load(context.Context) (*Checkpoint, error) {
	b, err := os.ReadFile(string(f))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read checkpoint: %w", err)
	}
	return decodeCheckpoint(b)
}

func (f fileCheckpoint) Save(_ context.Context, c *Checkpoint) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	// write then rename: a crash mid-write leaves the previous checkpoint.
	tmp, err := os.CreateTemp(filepath.Dir(string(f)), ".checkpoint-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), string(f))
}

func (f fileCheckpoint) Clear(context.Context) error {
	err := os.Remove(string(f))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

func decodeCheckpoint(b []byte) (*Checkpoint, error) {
	var c Checkpoint
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadCheckpoint, err)
	}
	if c.Version != checkpointVersion || c.Started.IsZero() {
		return nil, fmt.Errorf("%w: version %d, started %v", ErrBadCheckpoint, c.Version, c.Started)
	}
	return &c, nil
}
