package collector

import (
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/gc"
	"github.com/reclaim-registry/reclaim/reclaim"
)

// Plan is what a preview found deletable. Applying it deletes only objects
// it lists that still qualify at delete time. A Plan lives in the memory of
// the instance whose Preview made it, for Config.PlanTTL: it is applied
// there or not at all (unlike retention.Plan, which Redis keeps for every
// instance).
type Plan struct {
	ID         string          `json:"plan_id"`
	Repository string          `json:"repository"`
	CreatedAt  time.Time       `json:"created_at"`
	ExpiresAt  time.Time       `json:"expires_at"`
	Manifests  []digest.Digest `json:"manifests"`
	Layers     []digest.Digest `json:"layers"`
	Blobs      []digest.Digest `json:"blobs"`

	set map[key]bool
}

func (p *Plan) has(k reclaim.ObjectKind, d digest.Digest) bool { return p.set[key{k, d}] }

func (p *Plan) index() {
	p.set = map[key]bool{}
	for _, d := range p.Manifests {
		p.set[key{reclaim.KindManifest, d}] = true
	}
	for _, d := range p.Layers {
		p.set[key{reclaim.KindLayerLink, d}] = true
	}
	for _, d := range p.Blobs {
		p.set[key{reclaim.KindBlob, d}] = true
	}
}

type key struct {
	kind reclaim.ObjectKind
	d    digest.Digest
}

// policy is what a run decides by (gc.Policy), and what the collector
// itself needs of the request.
type policy struct {
	gc.Policy
	restrict *Plan // applying a plan: nothing it does not list is deleted
	dryRun   bool  // a reverse link found missing is reported, not written
}

// applying sets the plan the run applies.
func (p *policy) applying(plan *Plan) {
	p.restrict, p.Only = plan, plan.has
}
