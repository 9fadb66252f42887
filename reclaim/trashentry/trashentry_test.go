package trashentry

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// A restore's outcomes are a closed set: each round-trips, a name outside
// it does not parse, and docs/api.md and docs/openapi.yaml list each.
func TestOutcomesClosedAndDocumented(t *testing.T) {
	for _, doc := range []string{"../../docs/api.md", "../../docs/openapi.yaml"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range Outcomes() {
			if !strings.Contains(string(b), "`"+o.String()+"`") && !strings.Contains(string(b), " "+o.String()+",") && !strings.Contains(string(b), " "+o.String()+"]") {
				t.Errorf("%s does not mention restore outcome %s", doc, o)
			}
		}
	}
	for _, o := range Outcomes() {
		b, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		var back Outcome
		if err := json.Unmarshal(b, &back); err != nil || back != o {
			t.Fatalf("%s does not round-trip: %v", o, err)
		}
	}
	var o Outcome
	if err := json.Unmarshal([]byte(`"gone"`), &o); err == nil {
		t.Fatal("an outcome outside the set parsed")
	}
	if !AlreadyThere.Back() || TagMoved.Back() {
		t.Fatal("Back: only restored and already_there are back")
	}
}
