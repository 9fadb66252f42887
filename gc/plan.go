package gc

import (
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/reclaim"
)

// Plan is what a preview found deletable. Applying it deletes only objects
// it lists that still qualify at delete time.
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

// policy is everything a run decides by besides the snapshot and the
// facts: the request, the configuration and what the preconditions found.
type policy struct {
	repo       string // "" for the reclaimer: every link is another repository's
	now        time.Time
	window     time.Duration
	cap        int // link deletions per run; 0 means no cap
	keepUntag  bool
	pins       bool  // a Pinner is configured: consult the pin facts
	restrict   *Plan // applying a plan: nothing it does not list is deleted
	linkdbOK   bool
	linkdbNote string
	dryRun     bool // a reverse link found missing is reported, not written
}

// recent reports whether t is within the window.
func (p policy) recent(t time.Time) bool { return t.After(p.now.Add(-p.window)) }

// inPlan reports whether an applied plan (if any) lists the object.
func (p policy) inPlan(k reclaim.ObjectKind, d digest.Digest) bool {
	return p.restrict == nil || p.restrict.has(k, d)
}

// planned is what decide returns: a decision for every object, and what to
// delete in the order the delete phase deletes it.
type planned struct {
	s         *snapshot
	decisions []Decision      // every object, in report order
	manifests []digest.Digest // to delete, parents before children
	layers    []digest.Digest
	blobs     []digest.Digest
}
