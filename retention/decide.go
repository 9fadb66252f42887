package retention

import (
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/internal/enum"
	"github.com/reclaim-registry/reclaim/retention/pin"
)

// Verdict is what the policy decided for one version: why it is kept, or
// that it is a candidate. A closed set, like SkipReason (its names are
// the "reason" of a plan's entries).
type Verdict string

// Why a version is kept, or that it is a candidate.
const (
	KeptInUse         Verdict = "in_use" // a source declares it (or a manifest of its index)
	KeptNewerThanUsed Verdict = "newer_than_in_use"
	KeptRollbackSlack Verdict = "rollback_slack" // one of the K below the oldest in use
	KeptNewest        Verdict = "newest"         // one of the newest N, nothing in use
	KeptPinned        Verdict = "pinned"         // an active pin names its digest or a tag
	KeptPulled        Verdict = "pulled_within"  // pulled within the policy's pulled_within
	KeptTooYoung      Verdict = "younger_than_min_age"
	KeptOverCap       Verdict = "over_cap" // a candidate left for a later run
	Candidate         Verdict = "candidate"
)

var verdicts = enum.Strings("retention.Verdict", Candidate, KeptInUse, KeptNewerThanUsed, KeptRollbackSlack, KeptNewest,
	KeptPinned, KeptPulled, KeptTooYoung, KeptOverCap)

func (v Verdict) String() string { return verdicts.String(v) }

// MarshalText encodes the name; a verdict outside the set is an error.
func (v Verdict) MarshalText() ([]byte, error) { return verdicts.MarshalText(v) }

// UnmarshalText decodes a name, strictly.
func (v *Verdict) UnmarshalText(b []byte) error { return verdicts.UnmarshalText(b, v) }

// Entry is a version with what the policy decided for it.
type Entry struct {
	Version
	Reason Verdict `json:"reason"`
}

// Decision is the policy applied to one repository's versions.
type Decision struct {
	Candidates []Entry `json:"candidates"`
	Kept       []Entry `json:"kept"`
	// Trimmed counts candidates left over the cap (kept as over_cap).
	Trimmed int `json:"trimmed"`
}

// decide applies p to versions (newest first), given the versions in use,
// the active pins and the versions pulled within p.PulledWithin, at now.
// It does no I/O.
//
//   - With a version in use, everything newer than the oldest in-use
//     version is kept, and K versions below it; without one, the newest N.
//   - Below that, a version is a candidate only if it is not pinned, not
//     pulled lately, and its time is older than the retention age:
//     creation time permits a delete, it never asks for one.
//   - Over the cap, the oldest Cap candidates stay candidates.
func decide(versions []Version, inUse map[digest.Digest]bool, pins []pin.Pin, pulled map[digest.Digest]bool, p Policy, now time.Time) Decision {
	pinned := map[string]bool{}
	for _, pin := range pins {
		if pin.Active(now) {
			pinned[pin.Ref] = true
		}
	}
	protect, anchored := p.KeepNewest, false
	for i, v := range versions {
		if inUse[v.Digest] {
			protect, anchored = i+1+p.RollbackSlack, true
		}
	}
	oldestUsed := protect - p.RollbackSlack - 1
	d := Decision{Candidates: []Entry{}, Kept: []Entry{}}
	for i, v := range versions {
		reason := Candidate
		switch {
		case inUse[v.Digest]:
			reason = KeptInUse
		case anchored && i < oldestUsed:
			reason = KeptNewerThanUsed
		case anchored && i < protect:
			reason = KeptRollbackSlack
		case !anchored && i < protect:
			reason = KeptNewest
		case isPinned(v, pinned):
			reason = KeptPinned
		case pulled[v.Digest]:
			reason = KeptPulled
		case now.Sub(v.Time) < time.Duration(p.MinAge):
			reason = KeptTooYoung
		}
		e := Entry{Version: v, Reason: reason}
		if reason == Candidate {
			d.Candidates = append(d.Candidates, e)
		} else {
			d.Kept = append(d.Kept, e)
		}
	}
	if over := len(d.Candidates) - p.Cap; over > 0 {
		for _, e := range d.Candidates[:over] {
			e.Reason = KeptOverCap
			d.Kept = append(d.Kept, e)
		}
		d.Candidates, d.Trimmed = d.Candidates[over:], over
	}
	return d
}

func isPinned(v Version, pinned map[string]bool) bool {
	if pinned[v.Digest.String()] {
		return true
	}
	for _, t := range v.Tags {
		if pinned[t] {
			return true
		}
	}
	return false
}
