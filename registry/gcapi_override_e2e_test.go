package registry_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/reclaim-registry/reclaim/registry/registrytest"
)

// startGCWith is startGC with more options in the gc block.
func startGCWith(t *testing.T, gcOpts map[string]any) *gcRegistry {
	t.Helper()
	opts := reclaimOptions(t, e2eWindow, "")
	gcBlock := map[string]any{"enabled": true}
	for k, v := range gcOpts {
		gcBlock[k] = v
	}
	opts["gc"] = gcBlock
	g := completeGC(t, registrytest.Start(t,
		registrytest.WithStorageMiddleware("gchook", nil),
		registrytest.WithStorageMiddleware("reclaim", opts)))
	g.settle(t)
	return g
}

// Issue 25, finding 2: untagged=delete in a request overrode the
// configured untagged: keep. It is refused, in the query or the body, on
// collect, plan and apply, dry run or not, unless the config allows
// callers to override; asking for keep is always fine.
func TestE2EUntaggedOverrideRefused(t *testing.T) {
	g := startGCWith(t, map[string]any{"untagged": "keep"})
	old := deletable(t, g, "keep/app")
	planID := makePlan(t, g, "keep/app")
	for _, c := range []struct{ path, body string }{
		{"/collect?dry_run=false&untagged=delete", ""},
		{"/collect?untagged=delete", ""},
		{"/collect", `{"dry_run":false,"untagged":"delete"}`},
		{"/plan?untagged=delete", ""},
		{"/plans/" + planID + "/apply?dry_run=false&untagged=delete", ""},
	} {
		rejected(t, g, "POLICY_OVERRIDE_DENIED", http.MethodPost, "/gc/v1/repositories/keep/app"+c.path, c.body)
	}
	_, _, b := g.send(t, http.MethodPost, "/gc/v1/repositories/keep/app/collect?untagged=delete", "")
	if !strings.Contains(string(b), "untagged=delete is not allowed: the registry's config sets untagged: keep") {
		t.Errorf("message: %s", b)
	}
	for _, path := range []string{"/collect?dry_run=false&untagged=keep", "/collect?dry_run=false"} {
		code, _, b := g.send(t, http.MethodPost, "/gc/v1/repositories/keep/app"+path, "")
		if code != http.StatusOK || containsDigest(decodeReport(t, b).ManifestsDeleted, old) {
			t.Fatalf("%s: %d %s", path, code, b)
		}
	}
	if !stored(t, g, "keep/app", old) {
		t.Fatal("the untagged manifest is gone under untagged: keep")
	}
}

func TestE2EUntaggedOverrideAllowed(t *testing.T) {
	g := startGCWith(t, map[string]any{"untagged": "keep", "allowuntaggedoverride": true})
	old := deletable(t, g, "keep/app")
	code, _, b := g.send(t, http.MethodPost, "/gc/v1/repositories/keep/app/collect?dry_run=false&untagged=delete", "")
	if code != http.StatusOK || !containsDigest(decodeReport(t, b).ManifestsDeleted, old) || stored(t, g, "keep/app", old) {
		t.Fatalf("override allowed: %d %s", code, b)
	}
}
