package trash

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/opencontainers/go-digest"
	"github.com/redis/go-redis/v9"

	"github.com/reclaim-registry/reclaim/reclaim/trashentry"
	"github.com/reclaim-registry/reclaim/redisstate"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// Config wires a Bin.
type Config struct {
	// Raw is the driver below the middleware: holds are written and read
	// there, like reverse links.
	Raw storagedriver.StorageDriver
	// Driver is the driver wrapped by the middleware: a restore writes
	// forward links through it, as a push does (reverse link first, the
	// fence check, the access record).
	Driver storagedriver.StorageDriver
	// Tracker fences a tag while a restore puts it back (the tag fence a
	// retention delete takes), and is the clock entries are timed by: the
	// Redis server's, as access records and the reclaimer's purge are, so
	// an entry removed on one instance expires by the same clock on all.
	Tracker *redisstate.Tracker
	Redis   redis.UniversalClient
	Prefix  string
	// Retryable says whether a link write Driver refused may succeed if
	// tried again (the middleware's ErrRetryable: a GC fence held); nil:
	// none is retried.
	Retryable func(error) bool
	// Keep is how long an entry stays restorable; it must be positive.
	Keep time.Duration
}

// Bin is the trash: it holds, lists, restores and purges.
type Bin struct {
	cfg Config
	idx index
}

// New returns the trash of cfg.
func New(cfg Config) (*Bin, error) {
	if cfg.Keep <= 0 {
		return nil, fmt.Errorf("trash: keep %v must be positive (0 turns the trash off)", cfg.Keep)
	}
	if cfg.Raw == nil || cfg.Driver == nil || cfg.Redis == nil || cfg.Tracker == nil {
		return nil, errors.New("trash: Raw, Driver, Tracker and Redis are required")
	}
	return &Bin{cfg: cfg, idx: index{c: cfg.Redis, prefix: cfg.Prefix}}, nil
}

// now is the clock's time, or the local one when it cannot be read (a
// few seconds of skew on an expiry days away).
func (b *Bin) now(ctx context.Context) time.Time {
	if t, err := b.cfg.Tracker.Now(ctx); err == nil {
		return t.UTC()
	}
	return time.Now().UTC()
}

// Keep is how long an entry stays restorable.
func (b *Bin) Keep() time.Duration { return b.cfg.Keep }

// Hold writes e's hold on its blob (e.Digest) before its object is
// removed: one storage write, durable as a reverse link, then one Redis
// round trip for the index (best effort: storage is the truth). It sets
// the entry's ID, Removed and Expires.
func (b *Bin) Hold(ctx context.Context, e trashentry.Entry) (trashentry.Entry, error) {
	now := b.now(ctx)
	var rnd [4]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return e, err
	}
	e.ID = fmt.Sprintf("%d-%s", now.UnixMilli(), hex.EncodeToString(rnd[:]))
	e.Removed, e.Expires = now, now.Add(b.cfg.Keep)
	raw, err := json.Marshal(e)
	if err != nil {
		return e, err
	}
	if err := b.cfg.Raw.PutContent(ctx, layout.TrashHoldPath(e.Digest, e.ID), raw); err != nil {
		return e, fmt.Errorf("hold %s on %s: %w", e.ID, e.Digest, err)
	}
	if err := b.idx.add(ctx, e); err != nil {
		return e, nil // the hold keeps the data; Reindex finds it
	}
	return e, nil
}

// Drop removes e's hold and its index entries: a restore that put the
// object back, a purge, or a delete that did not happen.
func (b *Bin) Drop(ctx context.Context, e trashentry.Entry) error {
	err := b.cfg.Raw.Delete(ctx, path.Dir(layout.TrashHoldPath(e.Digest, e.ID)))
	if err != nil && !layout.IsNotFound(err) {
		return fmt.Errorf("drop hold %s on %s: %w", e.ID, e.Digest, err)
	}
	return b.idx.remove(ctx, e)
}

// Holds reads every hold on blob from storage, oldest first. A hold that
// cannot be parsed is an error: it keeps its blob all the same.
func (b *Bin) Holds(ctx context.Context, blob digest.Digest) ([]trashentry.Entry, error) {
	dirs, err := b.cfg.Raw.List(ctx, layout.TrashDir(blob))
	if layout.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []trashentry.Entry
	for _, dir := range dirs {
		id := dir[strings.LastIndexByte(dir, '/')+1:]
		if !layout.ValidTrashID(id) {
			continue
		}
		e, ok, err := b.read(ctx, blob, id)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, e)
		}
	}
	return out, nil // List is sorted; ids start with the removal time
}

// read reads one hold from storage; ok is false when it is gone.
func (b *Bin) read(ctx context.Context, blob digest.Digest, id string) (trashentry.Entry, bool, error) {
	raw, err := b.cfg.Raw.GetContent(ctx, layout.TrashHoldPath(blob, id))
	if layout.IsNotFound(err) {
		return trashentry.Entry{}, false, nil
	}
	if err != nil {
		return trashentry.Entry{}, false, err
	}
	var e trashentry.Entry
	if err := json.Unmarshal(raw, &e); err != nil || e.ID != id || e.Digest != blob {
		return e, false, fmt.Errorf("trash hold %s on %s: not a hold record (%q)", id, blob, truncate(raw))
	}
	return e, true, nil
}

func truncate(b []byte) string {
	if len(b) > 80 {
		return string(b[:80]) + "..."
	}
	return string(b)
}

// Lookup tells a pull that would answer 404 whether it asks for something
// in the trash: name is "tag:<tag>", a manifest digest, or "blob:<digest>".
// One Redis round trip.
func (b *Bin) Lookup(ctx context.Context, repo, name string) (trashentry.Entry, bool, error) {
	return b.idx.lookup(ctx, repo, name)
}
