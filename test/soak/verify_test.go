package soak

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/linkdb"
)

// verifyAll pulls every tag of every repository and every referrer of every
// tagged manifest. With no workload running, every failure is a loss. With a
// racing workload (w, else nil), a tag whose manifest is unknown is excused
// when it points at a manifest the workload PUT to it while a DELETE of that
// manifest ran, and every tagged manifest must also have its blobs linked in
// its repository in storage (else GC does not protect them). It returns the
// images verified and the tags excused.
func verifyAll(ctx context.Context, t *testing.T, r *registrytest.Registry, repos []string, w *workload) (images, excused int) {
	t.Helper()
	for _, repo := range repos {
		tags, err := listTags(ctx, r, repo)
		if err != nil {
			t.Errorf("list tags of %s: %v", repo, err)
			continue
		}
		for _, tag := range tags {
			n, ok := verifyTag(ctx, t, r, repo, tag, w)
			images += n
			if ok {
				excused++
			}
		}
	}
	return images, excused
}

// verifyTag verifies repo:tag and its referrers (see verifyAll). It returns
// the images verified and whether the tag was excused.
func verifyTag(ctx context.Context, t *testing.T, r *registrytest.Registry, repo, tag string, w *workload) (int, bool) {
	t.Helper()
	d, err := pullVerify(ctx, r, repo, ":"+tag)
	if err != nil && strings.Contains(err.Error(), "unknown tag=") {
		// The tag directory exists without a current link: a tag
		// write or delete failed half-way (upstream behaviour under
		// storage faults; a write the middleware refused removes
		// what it left, best effort: docs/gc-protocol.md, case 13).
		// It references nothing. A tag whose manifest is gone says
		// "unknown manifest" instead.
		t.Logf("dangling tag directory %s:%s (no current link)", repo, tag)
		return 0, false
	}
	if err != nil && w != nil && strings.Contains(errorClass(err), "MANIFEST_UNKNOWN") {
		m, ok := w.danglingOK(repo, tag)
		if ok {
			// never partially present: the manifest itself is gone
			t.Logf("dangling tag %s:%s -> %s (its PUT raced a DELETE of that manifest, or that DELETE failed half-way)", repo, tag, m)
			return 0, true
		}
		err = fmt.Errorf("%w (tag -> %s, not a manifest whose PUT raced its DELETE or whose DELETE failed)", err, m)
	}
	if err != nil {
		t.Errorf("LOST DATA: %s:%s (%s): %v%s", repo, tag, errorClass(err), err, diagAbout(lostDigest(err), repo+":"+tag))
		return 0, false
	}
	if w != nil {
		missing, err := w.unlinked(ctx, repo, digest.Digest(d.String()), 0)
		if err != nil || len(missing) > 0 {
			t.Errorf("%s:%s -> %s pulls, but %s does not link %v (%v): GC does not protect them", repo, tag, d, repo, missing, err)
		}
	}
	refs, err := referrers(ctx, r, repo, d)
	if err != nil {
		t.Errorf("%s:%s: %v", repo, tag, err)
		return 1, false
	}
	images := 1
	for _, rd := range refs {
		if _, err := pullVerify(ctx, r, repo, "@"+rd.String()); err != nil {
			t.Errorf("LOST DATA: referrer %s of %s:%s (%s): %v", rd, repo, tag, errorClass(err), err)
			continue
		}
		images++
	}
	return images, false
}

// linkdbVerify runs `linkdb verify` on the shared storage.
func linkdbVerify(ctx context.Context, t *testing.T, raw storagedriver.StorageDriver) *linkdb.Report {
	t.Helper()
	rep, err := linkdb.Verify(ctx, raw, linkdb.VerifyOptions{Workers: 2})
	if err != nil {
		t.Fatalf("linkdb verify: %v", err)
	}
	return rep
}

func summarize(rep *linkdb.Report) string {
	var b strings.Builder
	fmt.Fprintf(&b, "exit=%d blobs=%d forward=%d reverse=%d", rep.ExitCode, rep.Blobs, rep.ForwardLinks, rep.ReverseLinks)
	for _, k := range linkdb.Kinds {
		if n := rep.Counts[k]; n > 0 {
			fmt.Fprintf(&b, " %s=%d", k, n)
		}
	}
	for i, f := range rep.Findings {
		if i == 5 {
			break
		}
		fmt.Fprintf(&b, "\n    %+v", f)
	}
	return b.String()
}

// judgeLinkDB: no forward link without its reverse link, nothing corrupt,
// broken or unreadable. Stale reverse links (a forward write or a
// take-back that failed, a delete called off after its forward delete; a
// writer's repair after a concurrent delete won the forward link, before
// the writer took it back) are a leak: counted, allowed. Dangling tags (a
// tag directory without its current link, which a tag write or delete
// that failed half-way under the soak's storage faults leaves, as
// upstream does; verifyTag logs each) reference nothing: counted, allowed.
func judgeLinkDB(t *testing.T, when string, rep *linkdb.Report) {
	t.Helper()
	if n := rep.Counts[linkdb.MissingReverse]; n > 0 {
		t.Errorf("linkdb verify %s: %d forward links without their reverse link", when, n)
	}
	for _, k := range linkdb.Kinds {
		if k == linkdb.MissingReverse || k == linkdb.StaleReverse || k == linkdb.Reclaimable {
			continue
		}
		if k == linkdb.DanglingTag {
			t.Logf("linkdb verify %s: %s=%d (allowed)", when, k, rep.Counts[k])
			continue
		}
		if n := rep.Counts[k]; n > 0 {
			t.Errorf("linkdb verify %s: %s=%d", when, k, n)
		}
	}
}

// diagnose describes, from the storage itself, what is left of repo's
// manifest top and of the missing object: for the report of a loss.
func (c *cluster) diagnose(repo string, top v1.Hash, err error) string {
	ctx := context.Background()
	exists := func(p string) string {
		if _, err := c.raw.Stat(ctx, p); err != nil {
			return "missing"
		}
		return "present"
	}
	var b strings.Builder
	if top.Hex != "" {
		td := digest.Digest(top.String())
		fmt.Fprintf(&b, "top %s: revision link %s, data %s; ", top, exists(layout.RevisionLinkPath(repo, td)), exists(layout.BlobDataPath(td)))
	}
	var ve *verifyError
	if errors.As(err, &ve) && ve.missing.Hex != "" {
		md := digest.Digest(ve.missing.String())
		fmt.Fprintf(&b, "missing %s: revision link %s, layer link %s, data %s, reverse links %s",
			ve.missing, exists(layout.RevisionLinkPath(repo, md)), exists(layout.LayerLinkPath(repo, md)),
			exists(layout.BlobDataPath(md)), exists(layout.ReverseLinksDir(md)))
	}
	return b.String()
}
