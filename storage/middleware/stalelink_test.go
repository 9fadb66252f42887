package middleware

import (
	"context"
	"net/http"
	"testing"

	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

// Race 1, the deleter wins the forward link: a manifest PUT of a manifest
// that is there already (by tag or by digest) is paused right after its
// revision link write landed; a DELETE of the manifest runs to completion
// meanwhile (it deletes that very forward link, then the reverse link, and
// its look finds no forward link). The PUT's look then finds the reverse
// link gone and writes it again for a forward link that no longer exists.
// The PUT by tag then fails 503 (its tag's revision link is gone), the PUT
// by digest answered 201 before the DELETE. Either way no forward link is
// left, and its reverse link must go too: a stale one keeps the manifest's
// blob until linkdb rebuild (found by the soak: 26 stale_reverse findings
// in 10 minutes).
func TestRaceManifestPutLosesToDelete(t *testing.T) {
	for _, tc := range []struct {
		name string
		ref  func(m string) string
		want int // the PUT's answer
	}{
		{"by tag", func(string) string { return "v1" }, http.StatusServiceUnavailable},
		{"by digest", func(m string) string { return m }, http.StatusCreated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forEachCache(t, []string{"", "inmemory", "redis"}, func(t *testing.T, a *testApp) {
				img := a.pushRandom("r:v1", 1)
				m, _ := imageDigests(t, img)
				g := storagetest.NewGate("PutContent", layout.RevisionLinkPath("r", m))
				g.Match = inRequest(http.MethodPut, "/manifests/")
				put := pausedAfter(t, g, func() int { return a.putManifest("r", tc.ref(m.String()), img) }, func() {
					if code := a.do(http.MethodDelete, "/v2/r/manifests/"+m.String()).StatusCode; code != http.StatusAccepted {
						t.Fatalf("DELETE during the PUT = %d, want 202", code)
					}
				})
				if put != tc.want {
					t.Errorf("PUT = %d, want %d", put, tc.want)
				}
				if _, err := a.env.Raw.Stat(context.Background(), layout.RevisionLinkPath("r", m)); err == nil {
					t.Fatal("the revision link is there: the DELETE did not win it (the interleaving did not happen)")
				}
				checkLinkDB(t, a.env.Raw) // no forward link without its reverse link, and no stale reverse link
			})
		})
	}
}
