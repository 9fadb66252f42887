package reclaim

import (
	"encoding/json"
	"os"
	"strings"
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

// TestReasonsDocumented fails when a reason is added without documenting it
// in docs/api.md and docs/openapi.yaml.
func TestReasonsDocumented(t *testing.T) {
	for _, doc := range []string{"../docs/api.md", "../docs/openapi.yaml"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range Reasons() {
			if !strings.Contains(string(b), r.String()) {
				t.Errorf("%s does not mention reason %s", doc, r)
			}
		}
		for _, a := range []AbortReason{AbortRedisUnavailable, AbortRedisUntrusted, AbortRedisRecordingTooShort, AbortRedisEvicts, AbortManifestUnreadable, AbortStorageUnreadable} {
			if !strings.Contains(string(b), string(a)) {
				t.Errorf("%s does not mention abort reason %s", doc, a)
			}
		}
	}
}
