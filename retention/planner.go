package retention

import (
	"context"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/retention/pin"
)

// Tags reads a repository's tags (storage).
type Tags interface {
	// Tags lists every tag with its manifest and link time. A repository
	// without tags is an empty list; an error means the list is unknown.
	Tags(ctx context.Context, repo string) ([]TagInfo, error)
}

// PinLister reads a repository's active pins (retention/redisstore.Pins).
type PinLister interface {
	List(ctx context.Context, repo string) ([]pin.Pin, error)
}

// PullReader reads when each manifest of a repository was last pulled by a
// client whose pulls count (redisstate/pulls).
type PullReader interface {
	Pulled(ctx context.Context, repo string) (map[digest.Digest]time.Time, error)
}

// Planner builds plans. It reads; it never deletes.
type Planner struct {
	Tags      Tags
	Manifests Manifests
	Index     Index
	Pins      PinLister
	// Pulls is nil when pulls are not recorded: a policy with
	// pulled_within is then refused (errPullsOff).
	Pulls PullReader
	// MaxAge is the oldest an in-use source may be (retention.inusemaxage).
	MaxAge time.Duration
	Now    func() time.Time
}

// Plan builds the plan of repo under policy p (the configuration with o
// applied). Errors are *AbortError (or the context's); a repository that
// must be skipped is a plan with status skipped.
//
// After the plan is built, the index is read again and the policy applied
// once more with both reads' in-use versions: a candidate that is no
// longer one (it, or an older version, became in use) moves to Dropped.
func (pl *Planner) Plan(ctx context.Context, repo string, p Policy, o PolicyOverride) (*Plan, error) {
	now := pl.Now()
	plan := &Plan{ID: NewPlanID(), Repository: repo, CreatedAt: now.UTC(), Policy: p, PolicyFingerprint: p.fingerprint(),
		Override: o, Status: PlanReady, Decision: Decision{Candidates: []Entry{}, Kept: []Entry{}}, Dropped: []Entry{}, InUse: []digest.Digest{}}
	view, err := readIndex(ctx, pl.Index, repo, p, pl.MaxAge, now)
	if err != nil {
		return nil, err
	}
	plan.InUseAsOf = view.asOf.UTC()
	if view.skip != nil {
		return plan.skipped(*view.skip), nil
	}
	tags, err := pl.Tags.Tags(ctx, repo)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return plan.skipped(Skip{Reason: SkipTagsUnreadable, Detail: err.Error()}), nil
	}
	versions := Versions(tags, p)
	used, err := versionsInUse(ctx, pl.Manifests, repo, versions, view.digests)
	if err != nil {
		return nil, err
	}
	pins, err := pl.Pins.List(ctx, repo)
	if err != nil {
		return nil, abort(reclaim.AbortInUseUnreadable, "pins of %s: %v", repo, err)
	}
	pulled, skip, err := versionsPulled(ctx, pl.Pulls, pl.Manifests, repo, versions, p, now)
	if err != nil || skip != nil {
		return plan.skippedOr(skip, err)
	}
	first := decide(versions, used, pins, pulled, p, now)

	again, err := readIndex(ctx, pl.Index, repo, p, pl.MaxAge, pl.Now())
	if err != nil {
		return nil, err
	}
	if again.skip != nil {
		return plan.skipped(*again.skip), nil
	}
	plan.InUse = again.sorted()
	for d := range view.digests {
		again.digests[d] = true
	}
	if used, err = versionsInUse(ctx, pl.Manifests, repo, versions, again.digests); err != nil {
		return nil, err
	}
	plan.Decision = decide(versions, used, pins, pulled, p, now)
	still := map[string]bool{}
	for _, c := range plan.Candidates {
		still[c.Digest.String()] = true
	}
	for _, c := range first.Candidates {
		if !still[c.Digest.String()] {
			plan.Dropped = append(plan.Dropped, c)
		}
	}
	return plan, nil
}

func (p *Plan) skippedOr(s *Skip, err error) (*Plan, error) {
	if err != nil {
		return nil, err
	}
	return p.skipped(*s), nil
}

func (p *Plan) skipped(s Skip) *Plan {
	p.Status, p.Skip = PlanSkipped, &s
	return p
}
