package linkdb_test

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/linkdb"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

// A rebuild finds a referrer whose index entry is missing (written by a
// registry without the index) and, right after its look found the entry
// absent, a client DELETEs that referrer over HTTP. The rebuild must not
// then list a manifest that is gone: its entry follows the revision link
// (referrers.Index.Follow) instead of being added blindly.
func TestRebuildReferrerEntryFollowsADelete(t *testing.T) {
	r := registrytest.Start(t)
	img := registrytest.PushImage(t, r, "app:v1", 1)
	subject := registrytest.Describe(t, img)
	art := registrytest.PushArtifact(t, r, "app", subject)
	ref, sub := digest.Digest(art.Digest.String()), digest.Digest(subject.Digest.String())
	entry := layout.ReferrerLinkPath("app", sub, ref)
	d := fsDriver(r.Root)
	if err := d.Delete(t.Context(), entry); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	hooked := &storagetest.HookDriver{StorageDriver: d, After: func(_ context.Context, m, p string, err error) {
		if m == "Stat" && p == entry && layout.IsNotFound(err) {
			once.Do(func() { del(t, r, "/v2/app/manifests/"+ref.String()) })
		}
	}}
	res, err := linkdb.Rebuild(t.Context(), hooked, linkdb.RebuildOptions{Workers: 1, MinAge: -1})
	if err != nil {
		t.Fatal(err)
	}
	if registrytest.ManifestStatus(t, r, "app@"+ref.String()) != http.StatusNotFound {
		t.Fatal("the referrer was not deleted during the rebuild: the interleaving was not forced")
	}
	if res.ReferrersAdded != 0 {
		t.Errorf("rebuild added %d referrers entries, want 0 (the referrer was deleted)", res.ReferrersAdded)
	}
	rep := verify(t, d)
	if n := rep.Counts[linkdb.StaleReferrer]; n != 0 {
		t.Errorf("stale referrers entries after the rebuild: %d, want 0: %+v", n, rep.Findings)
	}
}
