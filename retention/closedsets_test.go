package retention

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/reclaim-registry/reclaim/reclaim"
)

// The reasons apply leaves a tag for are a closed set: each round-trips
// through JSON, a name outside the set does not parse, the two failures
// read as GC's, and the API schema lists exactly the set.
func TestLeftReasonsAreAClosedSetSpelledLikeGC(t *testing.T) {
	if ChangedCheckFail.String() != reclaim.ReasonCheckFailed.String() || ChangedDeleteErr.String() != reclaim.ReasonDeleteFailed.String() {
		t.Fatalf("%s/%s do not spell GC's %s/%s", ChangedCheckFail, ChangedDeleteErr, reclaim.ReasonCheckFailed, reclaim.ReasonDeleteFailed)
	}
	var names []string
	for _, r := range leftReasons.Values() {
		b, err := json.Marshal(TagResult{Tag: "v1", Reason: r})
		if err != nil {
			t.Fatal(err)
		}
		var back TagResult
		if err := json.Unmarshal(b, &back); err != nil || back.Reason != r {
			t.Fatalf("%s does not round-trip: %s %v", r, b, err)
		}
		names = append(names, r.String())
	}
	var bad TagResult
	if err := json.Unmarshal([]byte(`{"tag":"v1","reason":"moved"}`), &bad); err == nil {
		t.Fatal("a name outside the set parsed")
	}
	if b, err := json.Marshal(TagResult{Tag: "v1"}); err != nil || strings.Contains(string(b), "reason") {
		t.Fatalf("a deleted tag's result carries a reason: %s %v", b, err)
	}
	sameAsDocumented(t, `reason: \{type: string, enum: \[(in_use, pinned, pulled[^\]]*)\]\}`, names)
}

// A plan's verdicts are a closed set too, and the API schema lists exactly
// the set.
func TestVerdictsAreAClosedSet(t *testing.T) {
	var names []string
	for _, v := range verdicts.Values() {
		b, err := json.Marshal(Entry{Reason: v})
		if err != nil {
			t.Fatal(err)
		}
		var back Entry
		if err := json.Unmarshal(b, &back); err != nil || back.Reason != v {
			t.Fatalf("%s does not round-trip: %s %v", v, b, err)
		}
		names = append(names, v.String())
	}
	if _, err := json.Marshal(Entry{Reason: "kept"}); err == nil {
		t.Fatal("a verdict outside the set marshalled")
	}
	sameAsDocumented(t, `reason: \{type: string, enum: \[(candidate, [^\]]*)\]\}`, names)
}

// sameAsDocumented fails unless the enum docs/openapi.yaml gives at the
// first match of pattern (its group 1) lists exactly names.
func sameAsDocumented(t *testing.T, pattern string, names []string) {
	t.Helper()
	api, err := os.ReadFile("../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(pattern).FindSubmatch(api)
	if m == nil {
		t.Fatalf("docs/openapi.yaml: no enum matches %s", pattern)
	}
	documented := strings.Split(string(m[1]), ", ")
	slices.Sort(documented)
	names = slices.Sorted(slices.Values(names))
	if !slices.Equal(documented, names) {
		t.Fatalf("docs/openapi.yaml lists %v, the code %v", documented, names)
	}
}
