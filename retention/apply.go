package retention

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/retention/inuse"
)

// TagWriter reads and deletes single tags (storage).
type TagWriter interface {
	// Tag returns the manifest tag points at now; ok is false when there
	// is no such tag.
	Tag(ctx context.Context, repo, tag string) (d digest.Digest, ok bool, err error)
	// DeleteTag is a compare-and-delete. It fences tag against writes
	// that move it (a tag write checks that fence after it wrote), reads
	// the tag again under the fence, runs check under the fence too, and
	// deletes the tag only if it still points at want and check returned
	// no reason. It returns why it kept the tag ("" when it deleted it;
	// ChangedTagMoved, ChangedTagGone, check's reason, ChangedCheckFail
	// or ChangedDeleteErr otherwise).
	// When the trash is on, the tag's hold is written right before the
	// delete, and trashEntry names it.
	DeleteTag(ctx context.Context, d TagDelete, check func(context.Context) (reason LeftReason, detail string)) (reason LeftReason, detail, trashEntry string)
}

// TagDelete is one tag an apply deletes if it still points at Want.
type TagDelete struct {
	Repo, Tag string
	Want      digest.Digest
	Plan      string // the plan applied: the trash entry names it
}

// TagResult is one planned tag and what apply did with it.
type TagResult struct {
	Tag    string        `json:"tag"`
	Digest digest.Digest `json:"digest"`
	Reason LeftReason    `json:"reason,omitempty"`
	Detail string        `json:"detail,omitempty"`
	// Trash is the trash entry that holds a deleted tag (trash.keep > 0):
	// restorable by it, or by the plan id, until it expires.
	Trash string `json:"trash_entry,omitempty"`
}

// ApplyReport is what an apply did.
type ApplyReport struct {
	PlanID     string      `json:"plan_id"`
	Repository string      `json:"repository"`
	StartedAt  time.Time   `json:"started_at"`
	FinishedAt time.Time   `json:"finished_at"`
	Deleted    []TagResult `json:"deleted"`
	Skipped    []TagResult `json:"skipped"`
	// Aborted says why the run stopped before the end (the index became
	// empty or stale, or could not be read, or it changed and the apply
	// was asked to stop then).
	Aborted *AbortError `json:"aborted,omitempty"`
	indexChange
}

// indexChange says whether the repository's in-use manifests, as apply
// read them, differ from those its plan saw (Plan.InUse), over every read
// of the run.
type indexChange struct {
	InUseChanged bool `json:"inuse_changed"`
	// InUseAdded: in use at apply, not at the plan; InUseRemoved: the
	// other way round.
	InUseAdded   []digest.Digest `json:"inuse_added,omitempty"`
	InUseRemoved []digest.Digest `json:"inuse_removed,omitempty"`
	// InUseNote says what the change means for this run, in words.
	InUseNote string `json:"inuse_note,omitempty"`
}

// indexChangedNote is what an apply report, the CLI and the console say
// when the index changed since the plan.
const indexChangedNote = "the in-use index changed since this plan: versions that became in use during apply protect only themselves " +
	"(not the versions the policy keeps around them); preview again, or apply with stop_if_index_changed"

// ApplyOptions are one apply's choices.
type ApplyOptions struct {
	// StopIfIndexChanged stops the run (AbortInUseChanged) before its next
	// delete once the repository's in-use manifests differ from the plan's.
	StopIfIndexChanged bool `json:"stop_if_index_changed"`
}

// Applier deletes a plan's candidate tags, each only after checking fresh
// state right before its delete, under a fence on the tag that pushes
// moving it check (TagWriter.DeleteTag): the tag still points at the planned
// manifest, no source declares the manifest (or one its index lists), and
// no active pin names it or any of its tags, and, under a policy with
// pulled_within, no client whose pulls count pulled it lately. The whole index (sources,
// ages) is read again every Recheck, and a stale or empty index stops the
// run.
type Applier struct {
	Tags      TagWriter
	Manifests Manifests
	Index     Index
	// InUse answers from the index as it is now whether a source
	// declares the image (retention/redisstore.InUse).
	InUse interface {
		Contains(ctx context.Context, im inuse.Image) (bool, error)
	}
	Pins    PinLister
	Pulls   PullReader // nil: pulls are not recorded (Planner.Pulls)
	MaxAge  time.Duration
	Recheck time.Duration
	Now     func() time.Time
	// Deletions is optional: it hears, once per apply and after its last
	// delete, the tags it deleted (the deletion events). Nil: nobody.
	Deletions reclaim.DeletionSink
	// Instance names this process in what Deletions hears.
	Instance string
}

// Apply runs plan, oldest candidate first. The caller checked it is
// applicable (CheckApplicable). The index is read before the first delete
// and again every Recheck; each read is compared with the plan's
// (indexChange).
func (a *Applier) Apply(ctx context.Context, plan *Plan, o ApplyOptions) *ApplyReport {
	rep := &ApplyReport{PlanID: plan.ID, Repository: plan.Repository, StartedAt: a.Now().UTC(), Deleted: []TagResult{}, Skipped: []TagResult{}}
	defer func() {
		rep.FinishedAt = a.Now().UTC()
		a.announce(ctx, rep)
	}()
	var lastRead time.Time
	for i := len(plan.Candidates) - 1; i >= 0; i-- {
		v := plan.Candidates[i].Version
		if now := a.Now(); lastRead.IsZero() || now.Sub(lastRead) >= a.Recheck {
			view, err := readIndex(ctx, a.Index, plan.Repository, plan.Policy, a.MaxAge, now)
			if err != nil {
				rep.Aborted = abortReport(err)
				return rep
			}
			lastRead = now
			if rep.compare(plan, view) && o.StopIfIndexChanged {
				rep.Aborted = &AbortError{Reason: reclaim.AbortInUseChanged, Detail: rep.changeDetail()}
				return rep
			}
		}
		for _, tag := range v.Tags {
			r := TagResult{Tag: tag, Digest: v.Digest}
			r.Reason, r.Detail, r.Trash = a.Tags.DeleteTag(ctx, TagDelete{Repo: plan.Repository, Tag: tag, Want: v.Digest, Plan: plan.ID}, func(ctx context.Context) (LeftReason, string) {
				return a.fresh(ctx, plan, v)
			})
			if r.Reason == "" {
				rep.Deleted = append(rep.Deleted, r)
			} else {
				rep.Skipped = append(rep.Skipped, r)
			}
		}
	}
	return rep
}

// announce hands the tags rep deleted to Deletions, in the order apply
// deleted them (each delete returned: it is durable).
func (a *Applier) announce(ctx context.Context, rep *ApplyReport) {
	if a.Deletions == nil || len(rep.Deleted) == 0 {
		return
	}
	objs := make([]reclaim.Deletion, len(rep.Deleted))
	for i, t := range rep.Deleted {
		objs[i] = reclaim.Deletion{Kind: reclaim.KindTag, Repository: rep.Repository, Digest: t.Digest, Tag: t.Tag, Reason: "retention", Trash: t.Trash}
	}
	a.Deletions.Deleted(context.WithoutCancel(ctx), reclaim.Deletions{Source: "retention", PlanID: rep.PlanID, Instance: a.Instance, Objects: objs})
}

// compare folds one read of the index into the report and reports whether
// the index differs from the plan's so far. A read that found the
// repository's sources skipped (missing, empty) declares nothing for it: it
// compares as is, and the fresh checks keep what they cannot clear.
func (c *indexChange) compare(plan *Plan, view *indexView) bool {
	if plan.InUse == nil {
		c.InUseChanged, c.InUseNote = true, indexChangedNote+" (the plan does not record the index it saw)"
		return true
	}
	planned := map[digest.Digest]bool{}
	for _, d := range plan.InUse {
		planned[d] = true
		if !view.digests[d] && !slices.Contains(c.InUseRemoved, d) {
			c.InUseRemoved = append(c.InUseRemoved, d)
		}
	}
	for _, d := range view.sorted() {
		if !planned[d] && !slices.Contains(c.InUseAdded, d) {
			c.InUseAdded = append(c.InUseAdded, d)
		}
	}
	if len(c.InUseAdded)+len(c.InUseRemoved) > 0 {
		c.InUseChanged, c.InUseNote = true, indexChangedNote
	}
	return c.InUseChanged
}

func (c *indexChange) changeDetail() string {
	return fmt.Sprintf("the in-use index changed since the plan (%d manifests now in use, %d no longer) and stop_if_index_changed was asked; preview again",
		len(c.InUseAdded), len(c.InUseRemoved))
}

func abortReport(err error) *AbortError {
	if ae, ok := err.(*AbortError); ok {
		return ae
	}
	return &AbortError{Reason: reclaim.AbortInUseUnreadable, Detail: err.Error()}
}

// fresh checks v against the state now, under the fence of the tag about
// to be deleted (TagWriter.DeleteTag has read the tag by then); "" means
// delete it.
func (a *Applier) fresh(ctx context.Context, plan *Plan, v Version) (reason LeftReason, detail string) {
	repo := plan.Repository
	pins, err := a.Pins.List(ctx, repo)
	if err != nil {
		return ChangedCheckFail, "read pins: " + err.Error()
	}
	for _, p := range pins {
		if p.Active(a.Now()) && (p.Ref == v.Digest.String() || containsString(v.Tags, p.Ref)) {
			return ChangedPinned, "pin " + p.Ref
		}
	}
	_, children, err := a.Manifests.Children(ctx, repo, v.Digest)
	if err != nil {
		return ChangedCheckFail, "read manifest: " + err.Error()
	}
	manifests := append([]digest.Digest{v.Digest}, children...)
	for _, m := range manifests {
		used, err := a.InUse.Contains(ctx, inuse.Image{Repository: repo, Digest: m})
		if err != nil {
			return ChangedCheckFail, "read in-use index: " + err.Error()
		}
		if used {
			return ChangedInUse, m.String()
		}
	}
	return a.pulledLately(ctx, plan, manifests)
}

// pulledLately keeps a version one of whose manifests was pulled within
// the plan's pulled_within ("" when none was, or the policy has none).
func (a *Applier) pulledLately(ctx context.Context, plan *Plan, manifests []digest.Digest) (reason LeftReason, detail string) {
	if plan.Policy.PulledWithin == 0 {
		return "", ""
	}
	if a.Pulls == nil {
		return ChangedCheckFail, errPullsOff.Error()
	}
	pulls, err := a.Pulls.Pulled(ctx, plan.Repository)
	if err != nil {
		return ChangedCheckFail, "read pulls: " + err.Error()
	}
	recent := pulledSince(pulls, a.Now().Add(-time.Duration(plan.Policy.PulledWithin)))
	for _, m := range manifests {
		if recent[m] {
			return ChangedPulled, m.String() + " pulled at " + pulls[m].UTC().Format(time.RFC3339)
		}
	}
	return "", ""
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
