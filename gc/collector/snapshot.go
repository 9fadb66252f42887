package collector

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"sync"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/gc"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"golang.org/x/sync/errgroup"
)

// readConcurrency bounds the parallel storage and tracker reads of one run.
const readConcurrency = 8

// takeSnapshot reads tags, revisions, layer links and every revision's
// manifest. Any read error aborts: an unreadable tag could be a root, an
// unreadable manifest could reference anything. So does anything at a
// revision link or a tag's current link path that is not a file (a
// directory, a dangling symlink): skipping it would make a tagged manifest
// look untagged, or a manifest and what it references look absent.
func takeSnapshot(ctx context.Context, d storagedriver.StorageDriver, repo string) (*gc.Snapshot, error) {
	for attempt := 1; ; attempt++ {
		s, err := readSnapshot(ctx, d, repo)
		if !errors.Is(err, errWalkCut) || attempt == snapshotAttempts {
			return s, err
		}
	}
}

// snapshotAttempts bounds how often a snapshot is read again after a
// concurrent delete cut its walk short.
const snapshotAttempts = 3

// errWalkCut: a walk ended with "not found" although the directory it
// walks is there. Drivers without a native Walk list one directory at a
// time, and a directory deleted between being listed and being entered
// (a client deleting a manifest) ends the whole walk with PathNotFound:
// taken for "nothing there", it would hide every revision and tag after
// it, and what they reference would look unreferenced.
var errWalkCut = errors.New("the walk was cut short by a concurrent delete")

// walkEnd tells a walk that ended with err over an absent root (absent
// true) from one cut short (an error wrapping errWalkCut).
func walkEnd(ctx context.Context, d storagedriver.StorageDriver, root string, err error) (absent bool, _ error) {
	if !layout.IsNotFound(err) {
		return false, err
	}
	_, serr := d.Stat(ctx, root)
	switch {
	case layout.IsNotFound(serr):
		return true, nil
	case serr != nil:
		return false, serr
	}
	return false, fmt.Errorf("%s: %w", root, errWalkCut)
}

func readSnapshot(ctx context.Context, d storagedriver.StorageDriver, repo string) (*gc.Snapshot, error) {
	s := gc.NewSnapshot(repo)
	w := &manifestWalk{s: s,
		revDirs: map[digest.Digest]string{}, currentDirs: map[string]string{}, tagSeen: map[string]bool{}}
	noManifests, err := walkEnd(ctx, d, layout.ManifestsDir(repo), d.Walk(ctx, layout.ManifestsDir(repo), w.visit))
	if err != nil {
		return nil, abort(reclaim.AbortStorageUnreadable, fmt.Errorf("walk manifests of %s: %w", repo, err))
	}
	if err := w.probeUnseen(ctx, d); err != nil {
		return nil, err
	}
	noLayers, err := walkLayers(ctx, d, s)
	if err != nil {
		return nil, abort(reclaim.AbortStorageUnreadable, fmt.Errorf("walk layers of %s: %w", repo, err))
	}
	if noManifests && noLayers {
		return nil, fmt.Errorf("%w: %s", ErrRepositoryNotFound, repo)
	}
	if err := readContents(ctx, d, s, w.tagNames); err != nil {
		return nil, err
	}
	return s, nil
}

// manifestWalk collects the links under a repository's _manifests.
type manifestWalk struct {
	s        *gc.Snapshot
	tagNames []string
	// Directories that should hold a revision link or a tag's current link:
	// one where the walk saw no link file is probed, because Walk leaves out
	// an entry it cannot stat (a dangling symlink).
	revDirs     map[digest.Digest]string
	currentDirs map[string]string
	tagSeen     map[string]bool
}

func (w *manifestWalk) visit(fi storagedriver.FileInfo) error {
	p := layout.Classify(fi.Path())
	if p.Repo != w.s.Repo {
		return nil
	}
	if fi.IsDir() {
		return w.visitDir(fi.Path(), p)
	}
	switch p.Kind {
	case layout.PathRevisionLink:
		w.s.Revisions[p.Digest] = &gc.Manifest{Digest: p.Digest}
	case layout.PathTagCurrent:
		w.tagNames = append(w.tagNames, p.Tag)
		w.tagSeen[p.Tag] = true
	case layout.PathTagIndex:
		w.s.TagIndex[p.Digest] = append(w.s.TagIndex[p.Digest], p.Tag)
	case layout.PathReferrerLink:
		w.s.Referrers[p.Referrer] = append(w.s.Referrers[p.Referrer], p.Digest)
	}
	return nil
}

func (w *manifestWalk) visitDir(dir string, p layout.Path) error {
	switch {
	case p.Kind == layout.PathRevisionLinkDir:
		w.revDirs[p.Digest] = dir + "/link"
	case p.Kind == layout.PathTagDir && p.Tag != "" && dir == path.Dir(layout.TagCurrentPath(w.s.Repo, p.Tag)):
		w.currentDirs[p.Tag] = dir + "/link"
	case p.Kind == layout.PathRevisionLink, p.Kind == layout.PathTagCurrent:
		// Fail closed: this could be the tag or the revision that
		// keeps everything else.
		return fmt.Errorf("%s: %w: a directory", dir, errNotALink)
	}
	return nil
}

// probeUnseen looks at each revision and current-tag directory where the
// walk saw no link file.
func (w *manifestWalk) probeUnseen(ctx context.Context, d storagedriver.StorageDriver) error {
	repo := w.s.Repo
	for _, dg := range slices.Sorted(maps.Keys(w.revDirs)) {
		if _, ok := w.s.Revisions[dg]; ok {
			continue
		}
		present, err := probeLink(ctx, d, w.revDirs[dg])
		if err != nil {
			return abort(reclaim.AbortStorageUnreadable, fmt.Errorf("revision %s of %s: %w", dg, repo, err))
		}
		if present { // written since the walk passed
			w.s.Revisions[dg] = &gc.Manifest{Digest: dg}
		}
	}
	for tag, p := range w.currentDirs {
		if w.tagSeen[tag] {
			continue
		}
		present, err := probeLink(ctx, d, p)
		if err != nil {
			return abort(reclaim.AbortStorageUnreadable, fmt.Errorf("tag %s:%s: %w", repo, tag, err))
		}
		if present {
			w.tagNames = append(w.tagNames, tag)
		}
	}
	return nil
}

// walkLayers collects the layer links; absent when there is no _layers.
func walkLayers(ctx context.Context, d storagedriver.StorageDriver, s *gc.Snapshot) (absent bool, _ error) {
	root := layout.LayersDir(s.Repo)
	err := d.Walk(ctx, root, func(fi storagedriver.FileInfo) error {
		if p := layout.Classify(fi.Path()); !fi.IsDir() && p.Kind == layout.PathLayerLink && p.Repo == s.Repo {
			s.Layers[p.Digest] = true
		}
		return nil
	})
	return walkEnd(ctx, d, root, err)
}

// readContents reads every tag's current link and every revision's
// manifest, readConcurrency at a time.
func readContents(ctx context.Context, d storagedriver.StorageDriver, s *gc.Snapshot, tagNames []string) error {
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(readConcurrency)
	for _, tag := range tagNames {
		g.Go(func() error {
			dg, err := readLink(gctx, d, layout.TagCurrentPath(s.Repo, tag))
			if layout.IsNotFound(err) {
				return nil // the tag was deleted while we walked
			}
			if err != nil {
				return abort(reclaim.AbortStorageUnreadable, fmt.Errorf("read tag %s:%s: %w", s.Repo, tag, err))
			}
			mu.Lock()
			s.Tags[tag] = dg
			mu.Unlock()
			return nil
		})
	}
	for _, m := range s.Revisions {
		g.Go(func() error { return readManifest(gctx, d, m) })
	}
	return g.Wait()
}
