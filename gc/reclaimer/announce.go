package reclaimer

import (
	"context"

	"github.com/google/uuid"
	"github.com/reclaim-registry/reclaim/gc"
	"github.com/reclaim-registry/reclaim/reclaim"
)

// announce hands the blobs a tick deleted to Config.Deletions once every
// review of the tick returned (each delete is durable by then), in the
// order they were claimed: the workers delete them in parallel, so no
// other order is theirs. A blob found already gone is left out.
func (r *Reclaimer) announce(ctx context.Context, decs []gc.Decision) {
	if r.cfg.Deletions == nil {
		return
	}
	var objs []reclaim.Deletion
	for _, d := range decs {
		if d.Reason == reclaim.ReasonUnreferenced {
			objs = append(objs, reclaim.Deletion{Kind: reclaim.KindBlob, Digest: d.Digest, Size: d.Size, Reason: d.Reason.String()})
		}
	}
	if len(objs) == 0 {
		return
	}
	r.cfg.Deletions.Deleted(context.WithoutCancel(ctx), reclaim.Deletions{Source: "reclaimer", RunID: "tick-" + uuid.NewString(),
		Instance: r.c.Instance(), Objects: objs})
}
