package retention

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
)

type fakePulls struct {
	at  map[digest.Digest]time.Time
	err error
}

func (f fakePulls) Pulled(context.Context, string) (map[digest.Digest]time.Time, error) {
	return f.at, f.err
}

// A version is pulled when its manifest, or one its index lists, was pulled
// within pulled_within; no record refuses the policy, an unreadable one
// skips the repository.
func TestVersionsPulled(t *testing.T) {
	vs := line(3)
	child := digest.FromString("platform manifest")
	m := fakeManifests{vs[0].Digest: nil, vs[1].Digest: {child}, vs[2].Digest: nil, child: nil}
	p := policy()
	p.PulledWithin = Duration(30 * 24 * time.Hour)
	pulls := fakePulls{at: map[digest.Digest]time.Time{
		child:        t0.Add(-time.Hour),           // vs[1] through its index
		vs[2].Digest: t0.Add(-31 * 24 * time.Hour), // too long ago
	}}
	got, skip, err := versionsPulled(t.Context(), pulls, m, "r", vs, p, t0)
	if err != nil || skip != nil || len(got) != 1 || !got[vs[1].Digest] {
		t.Fatalf("pulled %v, skip %v, err %v", got, skip, err)
	}
	if d := decide(vs, nil, nil, got, Policy{MinAge: 1, Cap: 10}, t0); reasons(d)[vs[1].Digest] != KeptPulled || reasons(d)[vs[2].Digest] != Candidate {
		t.Fatalf("decision %v", reasons(d))
	}
	if _, _, err := versionsPulled(t.Context(), nil, m, "r", vs, p, t0); !errors.Is(err, errPullsOff) || !errors.Is(err, ErrInvalid) {
		t.Fatalf("no pull record: %v", err)
	}
	if _, skip, err := versionsPulled(t.Context(), fakePulls{err: errRead}, m, "r", vs, p, t0); err != nil || skip == nil || skip.Reason != SkipPullsUnreadable {
		t.Fatalf("unreadable: %v %v", skip, err)
	}
	p.PulledWithin = 0
	if got, skip, err := versionsPulled(t.Context(), nil, m, "r", vs, p, t0); got != nil || skip != nil || err != nil {
		t.Fatalf("off: %v %v %v", got, skip, err)
	}
}
