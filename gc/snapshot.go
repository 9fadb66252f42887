package gc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/opencontainers/go-digest"
	"golang.org/x/sync/errgroup"
)

// readConcurrency bounds the parallel storage and tracker reads of one run.
const readConcurrency = 8

// snapshot is everything a plan is built from: one read of the repository.
type snapshot struct {
	repo      string
	tags      map[string]digest.Digest          // tag -> current manifest
	tagIndex  map[digest.Digest][]string        // manifest -> tags whose history lists it
	revisions map[digest.Digest]*manifestInfo   // manifest revisions
	layers    map[digest.Digest]bool            // layer links
	referrers map[digest.Digest][]digest.Digest // referrer -> subjects in the referrers index
}

func newSnapshot(repo string) *snapshot {
	return &snapshot{
		repo:      repo,
		tags:      map[string]digest.Digest{},
		tagIndex:  map[digest.Digest][]string{},
		revisions: map[digest.Digest]*manifestInfo{},
		layers:    map[digest.Digest]bool{},
		referrers: map[digest.Digest][]digest.Digest{},
	}
}

// takeSnapshot reads tags, revisions, layer links and every revision's
// manifest. Any read error aborts: an unreadable tag could be a root, an
// unreadable manifest could reference anything. So does anything at a
// revision link or a tag's current link path that is not a file (a
// directory, a dangling symlink): skipping it would make a tagged manifest
// look untagged, or a manifest and what it references look absent.
func takeSnapshot(ctx context.Context, d storagedriver.StorageDriver, repo string) (*snapshot, error) {
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
	if !isNotFound(err) {
		return false, err
	}
	_, serr := d.Stat(ctx, root)
	switch {
	case isNotFound(serr):
		return true, nil
	case serr != nil:
		return false, serr
	}
	return false, fmt.Errorf("%s: %w", root, errWalkCut)
}

func readSnapshot(ctx context.Context, d storagedriver.StorageDriver, repo string) (*snapshot, error) {
	s := newSnapshot(repo)
	w := &manifestWalk{s: s, root: manifestsPath(repo) + "/",
		revDirs: map[digest.Digest]string{}, currentDirs: map[string]string{}, tagSeen: map[string]bool{}}
	noManifests, err := walkEnd(ctx, d, manifestsPath(repo), d.Walk(ctx, manifestsPath(repo), w.visit))
	if err != nil {
		return nil, abort(AbortStorageUnreadable, fmt.Errorf("walk manifests of %s: %w", repo, err))
	}
	if err := w.probeUnseen(ctx, d); err != nil {
		return nil, err
	}
	noLayers, err := walkLayers(ctx, d, s)
	if err != nil {
		return nil, abort(AbortStorageUnreadable, fmt.Errorf("walk layers of %s: %w", repo, err))
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
	s        *snapshot
	root     string
	tagNames []string
	// Directories that should hold a revision link or a tag's current link:
	// one where the walk saw no link file is probed, because Walk leaves out
	// an entry it cannot stat (a dangling symlink).
	revDirs     map[digest.Digest]string
	currentDirs map[string]string
	tagSeen     map[string]bool
}

func (w *manifestWalk) visit(fi storagedriver.FileInfo) error {
	c := strings.Split(strings.TrimPrefix(fi.Path(), w.root), "/")
	if fi.IsDir() {
		return w.visitDir(fi.Path(), c)
	}
	if !strings.HasSuffix(fi.Path(), "/link") {
		return nil
	}
	switch {
	case len(c) == 4 && c[0] == "revisions":
		if dg, ok := splitDigest(c[1], c[2]); ok {
			w.s.revisions[dg] = &manifestInfo{digest: dg}
		}
	case len(c) == 4 && c[0] == "tags" && c[2] == "current":
		w.tagNames = append(w.tagNames, c[1])
		w.tagSeen[c[1]] = true
	case len(c) == 6 && c[0] == "tags" && c[2] == "index":
		if dg, ok := splitDigest(c[3], c[4]); ok {
			w.s.tagIndex[dg] = append(w.s.tagIndex[dg], c[1])
		}
	case len(c) == 6 && c[0] == "referrers":
		sub, ok1 := splitDigest(c[1], c[2])
		ref, ok2 := splitDigest(c[3], c[4])
		if ok1 && ok2 {
			w.s.referrers[ref] = append(w.s.referrers[ref], sub)
		}
	}
	return nil
}

func (w *manifestWalk) visitDir(p string, c []string) error {
	switch {
	case len(c) == 3 && c[0] == "revisions":
		if dg, ok := splitDigest(c[1], c[2]); ok {
			w.revDirs[dg] = p + "/link"
		}
	case len(c) == 3 && c[0] == "tags" && c[2] == "current":
		w.currentDirs[c[1]] = p + "/link"
	case len(c) == 4 && c[0] == "revisions" && c[3] == "link",
		len(c) == 4 && c[0] == "tags" && c[2] == "current" && c[3] == "link":
		// Fail closed: this could be the tag or the revision that
		// keeps everything else.
		return fmt.Errorf("%s: %w: a directory", p, errNotALink)
	}
	return nil
}

// probeUnseen looks at each revision and current-tag directory where the
// walk saw no link file.
func (w *manifestWalk) probeUnseen(ctx context.Context, d storagedriver.StorageDriver) error {
	repo := w.s.repo
	for _, dg := range sortedDigests(w.revDirs) {
		if _, ok := w.s.revisions[dg]; ok {
			continue
		}
		present, err := probeLink(ctx, d, w.revDirs[dg])
		if err != nil {
			return abort(AbortStorageUnreadable, fmt.Errorf("revision %s of %s: %w", dg, repo, err))
		}
		if present { // written since the walk passed
			w.s.revisions[dg] = &manifestInfo{digest: dg}
		}
	}
	for tag, p := range w.currentDirs {
		if w.tagSeen[tag] {
			continue
		}
		present, err := probeLink(ctx, d, p)
		if err != nil {
			return abort(AbortStorageUnreadable, fmt.Errorf("tag %s:%s: %w", repo, tag, err))
		}
		if present {
			w.tagNames = append(w.tagNames, tag)
		}
	}
	return nil
}

// walkLayers collects the layer links; absent when there is no _layers.
func walkLayers(ctx context.Context, d storagedriver.StorageDriver, s *snapshot) (absent bool, _ error) {
	root := layersPath(s.repo)
	err := d.Walk(ctx, root, func(fi storagedriver.FileInfo) error {
		if fi.IsDir() || !strings.HasSuffix(fi.Path(), "/link") {
			return nil
		}
		c := strings.Split(strings.TrimPrefix(fi.Path(), root+"/"), "/")
		if len(c) == 3 {
			if dg, ok := splitDigest(c[0], c[1]); ok {
				s.layers[dg] = true
			}
		}
		return nil
	})
	return walkEnd(ctx, d, root, err)
}

// readContents reads every tag's current link and every revision's
// manifest, readConcurrency at a time.
func readContents(ctx context.Context, d storagedriver.StorageDriver, s *snapshot, tagNames []string) error {
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(readConcurrency)
	for _, tag := range tagNames {
		g.Go(func() error {
			dg, err := readLink(gctx, d, tagCurrentPath(s.repo, tag))
			if isNotFound(err) {
				return nil // the tag was deleted while we walked
			}
			if err != nil {
				return abort(AbortStorageUnreadable, fmt.Errorf("read tag %s:%s: %w", s.repo, tag, err))
			}
			mu.Lock()
			s.tags[tag] = dg
			mu.Unlock()
			return nil
		})
	}
	for _, m := range s.revisions {
		g.Go(func() error { return readManifest(gctx, d, m) })
	}
	return g.Wait()
}
