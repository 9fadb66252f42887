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
	for _, r := range LeftReasons() {
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
	api, err := os.ReadFile("../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`reason: \{type: string, enum: \[(in_use, pinned, pulled[^\]]*)\]\}`).FindSubmatch(api)
	if m == nil {
		t.Fatal("docs/openapi.yaml: no enum of an apply's left reasons")
	}
	documented := strings.Split(string(m[1]), ", ")
	slices.Sort(documented)
	slices.Sort(names)
	if !slices.Equal(documented, names) {
		t.Fatalf("docs/openapi.yaml lists %v, the code %v", documented, names)
	}
}
