package gc

import (
	"encoding/json"
	"testing"
)

func TestReasonsHaveStableUniqueNames(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range Reasons() {
		name := r.String()
		if name == "" || seen[name] || r.Message() == "" {
			t.Fatalf("reason %d: name %q", int(r), name)
		}
		seen[name] = true
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var back Reason
		if err := json.Unmarshal(b, &back); err != nil || back != r {
			t.Fatalf("%s does not round-trip: %v", name, err)
		}
	}
	if _, err := json.Marshal(Reason(0)); err == nil {
		t.Fatal("the zero reason must not marshal")
	}
}
