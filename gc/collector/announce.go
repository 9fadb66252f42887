package collector

import (
	"context"

	"github.com/reclaim-registry/reclaim/gc"
	"github.com/reclaim-registry/reclaim/reclaim"
)

// announce hands what the delete phase removed to Config.Deletions, in the
// order of the deletes, once they all returned (each is durable by then).
// An object found already gone is left out: whoever removed it told.
func (r *run) announce(ctx context.Context, s *gc.Snapshot) {
	if r.c.cfg.Deletions == nil {
		return
	}
	var objs []reclaim.Deletion
	for _, d := range r.rep.decisions {
		if d.Reason != reclaim.ReasonUnreferenced {
			continue
		}
		o := reclaim.Deletion{Kind: d.Kind, Repository: r.pol.Repo, Digest: d.Digest, Size: d.Size, Reason: d.Reason.String(), Trash: d.Trash}
		if m := s.Revisions[d.Digest]; d.Kind == reclaim.KindManifest && m != nil {
			o.MediaType = m.MediaType
		}
		objs = append(objs, o)
	}
	if len(objs) == 0 {
		return
	}
	r.c.cfg.Deletions.Deleted(context.WithoutCancel(ctx), reclaim.Deletions{Source: "gc", RunID: r.rep.RunID,
		PlanID: r.rep.PlanID, Instance: r.c.instance, Objects: objs})
}
