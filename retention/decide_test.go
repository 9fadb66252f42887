package retention

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/retention/pin"
)

var t0 = time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)

// line returns n versions, newest first, v(n-1) at t0 and one a day older
// each; index i of the result is version n-1-i.
func line(n int) []Version {
	var tags []TagInfo
	for i := range n {
		tags = append(tags, TagInfo{Name: fmt.Sprintf("v%02d", i), Digest: digest.FromString(fmt.Sprint(i)), Time: t0.Add(time.Duration(i-n+1) * 24 * time.Hour)})
	}
	return Versions(tags, Policy{})
}

func policy() Policy {
	return Policy{KeepNewest: 3, RollbackSlack: 2, MinAge: Duration(5 * 24 * time.Hour), Cap: 100}
}

func reasons(d Decision) map[digest.Digest]Verdict {
	out := map[digest.Digest]Verdict{}
	for _, e := range append(append([]Entry{}, d.Candidates...), d.Kept...) {
		out[e.Digest] = e.Reason
	}
	return out
}

func TestDecide(t *testing.T) {
	vs := line(20) // vs[0] newest (age 0 days), vs[19] 19 days old
	used := map[digest.Digest]bool{vs[8].Digest: true, vs[4].Digest: true}
	pins := []pin.Pin{{Ref: vs[15].Tags[0]}, {Ref: vs[17].Digest.String(), ExpiresAt: &t0}} // the second has expired
	d := decide(vs, used, pins, nil, policy(), t0)
	r := reasons(d)
	want := map[int]Verdict{0: KeptNewerThanUsed, 4: KeptInUse, 7: KeptNewerThanUsed, 8: KeptInUse, 9: KeptRollbackSlack,
		10: KeptRollbackSlack, 11: Candidate, 15: KeptPinned, 17: Candidate, 19: Candidate}
	for i, w := range want {
		if r[vs[i].Digest] != w {
			t.Errorf("v%d: %s, want %s", i, r[vs[i].Digest], w)
		}
	}
	if len(d.Candidates) != 8 || d.Trimmed != 0 {
		t.Fatalf("%d candidates", len(d.Candidates))
	}
	// Nothing in use: the newest N, then the age rule (vs[3], vs[4] are
	// younger than 5 days).
	r = reasons(decide(vs, nil, nil, nil, policy(), t0))
	if r[vs[2].Digest] != KeptNewest || r[vs[3].Digest] != KeptTooYoung || r[vs[4].Digest] != KeptTooYoung || r[vs[5].Digest] != Candidate {
		t.Fatalf("%v", r)
	}
	// Creation time only permits: an in-use version's age changes nothing,
	// and a version below the anchor younger than MinAge stays.
	p := policy()
	p.MinAge = Duration(100 * 24 * time.Hour)
	if d := decide(vs, used, nil, nil, p, t0); len(d.Candidates) != 0 {
		t.Fatalf("young versions are candidates: %+v", d.Candidates)
	}
	// The cap keeps the oldest candidates.
	p = policy()
	p.Cap = 3
	d = decide(vs, used, nil, nil, p, t0)
	if d.Trimmed != 6 || len(d.Candidates) != 3 || d.Candidates[2].Digest != vs[19].Digest || d.Candidates[0].Digest != vs[17].Digest {
		t.Fatalf("cap: %+v", d)
	}
}

func TestVersionsGroupAndFilter(t *testing.T) {
	a, b := digest.FromString("a"), digest.FromString("b")
	tags := []TagInfo{{"v1", a, t0}, {"latest", b, t0.Add(time.Hour)}, {"v1-rc", a, t0.Add(2 * time.Hour)}, {"v2", b, t0.Add(-time.Hour)}}
	vs := Versions(tags, Policy{Include: []string{"v*"}, Exclude: []string{"*-rc"}})
	if len(vs) != 2 || vs[0].Digest != a || vs[1].Digest != b || len(vs[1].Tags) != 1 || !vs[0].Time.Equal(t0) {
		t.Fatalf("%+v", vs)
	}
	vs = Versions(tags, Policy{})
	if vs[0].Digest != a || len(vs[0].Tags) != 2 || !vs[0].Time.Equal(t0.Add(2*time.Hour)) {
		t.Fatalf("newest tag time: %+v", vs)
	}
}

func TestPolicyOverrideAndFingerprint(t *testing.T) {
	base := policy()
	zero, age := 0, Duration(time.Hour)
	inc := []string{"v*"}
	p, err := PolicyOverride{KeepNewest: &zero, MinAge: &age, Include: &inc}.Apply(base)
	if err != nil || p.KeepNewest != 0 || p.MinAge != age || p.Include[0] != "v*" || p.RollbackSlack != 2 {
		t.Fatalf("%+v %v", p, err)
	}
	if p.fingerprint() == base.fingerprint() {
		t.Fatal("a changed policy has the same fingerprint")
	}
	neg, bad := -1, []string{"["}
	for _, o := range []PolicyOverride{{KeepNewest: &neg}, {RollbackSlack: &neg}, {Cap: &zero}, {Exclude: &bad}, {Sources: &bad}} {
		if _, err := o.Apply(base); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v", o, err)
		}
	}
	plan := &Plan{ID: NewPlanID(), Status: PlanReady, CreatedAt: t0, PolicyFingerprint: base.fingerprint()}
	if err := CheckApplicable(plan, base, t0.Add(time.Hour), 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := CheckApplicable(plan, p, t0, time.Hour); !errors.Is(err, ErrPolicyChanged) {
		t.Fatal(err)
	}
	if err := CheckApplicable(plan, base, t0.Add(3*time.Hour), 2*time.Hour); !errors.Is(err, ErrPlanExpired) {
		t.Fatal(err)
	}
	plan.Status = PlanSkipped
	if err := CheckApplicable(plan, base, t0, time.Hour); !errors.Is(err, ErrPlanSkipped) {
		t.Fatal(err)
	}
}
