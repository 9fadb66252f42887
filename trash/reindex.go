package trash

import (
	"context"
	"fmt"

	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/storage/layout"
)

// ReindexReport is what Reindex found and wrote.
type ReindexReport struct {
	Blobs   int // blob directories walked
	Entries int // holds found and indexed
	// Unreadable lists what could not be read: its holds, if any, are not
	// indexed (they keep their data all the same).
	Unreadable []string
}

// Reindex writes the index again from the holds in storage, after Redis
// lost it (a flush, a failover to an empty replica): one walk of the
// blob store (its cost grows with the blobs, like `gc sweep`), one read
// per hold, one round trip per entry. Writing an entry again is harmless,
// so it is safe while the registry serves.
func (b *Bin) Reindex(ctx context.Context) (ReindexReport, error) {
	var rep ReindexReport
	shards, err := layout.Shards(ctx, b.cfg.Raw)
	if err != nil {
		return rep, fmt.Errorf("trash reindex: list the blob store: %w", err)
	}
	for _, shard := range shards {
		var held []digest.Digest
		err := layout.WalkShard(ctx, b.cfg.Raw, shard, layout.ShardVisitor{Blob: func(bl *layout.Blob) {
			rep.Blobs++
			switch {
			case bl.Unreadable != "":
				rep.Unreadable = append(rep.Unreadable, bl.Dir+": "+bl.Unreadable)
			case bl.Held > 0:
				held = append(held, bl.Digest)
			}
		}})
		if err != nil {
			return rep, fmt.Errorf("trash reindex: walk %s: %w", shard, err)
		}
		for _, d := range held {
			entries, err := b.Holds(ctx, d)
			if err != nil {
				rep.Unreadable = append(rep.Unreadable, fmt.Sprintf("%s: %v", layout.TrashDir(d), err))
				continue
			}
			for _, e := range entries {
				if err := b.idx.add(ctx, e); err != nil {
					return rep, fmt.Errorf("trash reindex: index %s: %w", e.ID, err)
				}
				rep.Entries++
			}
		}
	}
	return rep, nil
}
