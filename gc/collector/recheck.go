package collector

import (
	"context"
	"fmt"
	"path"

	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/gc"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// sincePlan is what the manifests that appeared in the repository after the
// snapshot reference: manifests pushed since, and manifests this run
// deleted that a client pushed again. The plan counted neither.
type sincePlan struct {
	refs map[digest.Digest]bool
	err  error // the revisions could not be read: keep everything
}

// keeps reports why d may not be deleted after all, if it may not.
func (sp sincePlan) keeps(k reclaim.ObjectKind, d digest.Digest) (gc.Decision, bool) {
	switch {
	case sp.err != nil:
		return gc.Decision{Kind: k, Digest: d, Reason: reclaim.ReasonCheckFailed, Detail: fmt.Sprintf("re-read revisions: %v", sp.err)}, true
	case sp.refs[d] && k == reclaim.KindLayerLink:
		return gc.Decision{Kind: k, Digest: d, Reason: reclaim.ReasonReferenced, Detail: "referenced by a manifest pushed since the plan"}, true
	case sp.refs[d]:
		return gc.Decision{Kind: k, Digest: d, Reason: reclaim.ReasonIndexChild, Detail: "listed by an index pushed since the plan"}, true
	}
	return gc.Decision{}, false
}

// readSincePlan re-reads the repository's revision links, after a batch of
// fences was taken and before anything of the batch is deleted. A plan is
// older than its delete phase: a manifest PUT that completed after the snapshot
// touched what it references, but only a window before this re-read at
// best, and a delete phase that runs longer than the window (a slow store, many
// objects) would take the fence of a layer link or child manifest that
// manifest needs. Every revision link that is not one the plan counted
// (the snapshot's, minus those this run deleted) is read with its manifest,
// and what it references is kept. A PUT that writes its revision link after
// this re-read touched its references after the fence (refused) or more
// than a window earlier: a push slower than the window, which the protocol
// excludes (docs/gc-protocol.md, case 3).
func (dl *deleter) readSincePlan(ctx context.Context, s *gc.Snapshot, deleted map[digest.Digest]bool) sincePlan {
	dir := layout.RevisionsDir(dl.pol.Repo) + "/sha256"
	names, err := dl.c.driver.List(ctx, dir)
	if layout.IsNotFound(err) {
		return sincePlan{}
	}
	if err != nil {
		return sincePlan{err: err}
	}
	sp := sincePlan{refs: map[digest.Digest]bool{}}
	for _, n := range names {
		d := digest.NewDigestFromEncoded(digest.SHA256, path.Base(n))
		if d.Validate() != nil {
			continue // not a revision directory Distribution writes
		}
		if _, counted := s.Revisions[d]; counted && !deleted[d] {
			continue
		}
		if _, err := dl.c.driver.Stat(ctx, layout.RevisionLinkPath(dl.pol.Repo, d)); layout.IsNotFound(err) {
			continue // an empty directory left by a delete
		} else if err != nil {
			return sincePlan{err: err}
		}
		m := &gc.Manifest{Digest: d}
		if err := readManifest(ctx, dl.c.driver, m); err != nil {
			return sincePlan{err: err}
		}
		if !m.Known {
			return sincePlan{err: fmt.Errorf("manifest %s pushed since the plan has media type %q", d, m.MediaType)}
		}
		for _, r := range m.Refs {
			sp.refs[r] = true
		}
	}
	return sp
}
