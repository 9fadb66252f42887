package gc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/distribution/distribution/v3"
	"github.com/distribution/distribution/v3/manifest/manifestlist"
	_ "github.com/distribution/distribution/v3/manifest/ocischema" // registers the OCI manifest and index
	"github.com/distribution/distribution/v3/manifest/schema2"
	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sync/errgroup"
)

// knownMediaTypes are the manifest types Distribution accepts on push. The
// schema packages imported above register their unmarshal functions with
// distribution.UnmarshalManifest in init.
var knownMediaTypes = map[string]bool{
	schema2.MediaTypeManifest:          true,
	v1.MediaTypeImageManifest:          true,
	manifestlist.MediaTypeManifestList: true,
	v1.MediaTypeImageIndex:             true,
}

// readConcurrency bounds parallel storage reads of one run.
const readConcurrency = 8

// manifestInfo is one manifest revision as the collector sees it.
type manifestInfo struct {
	digest    digest.Digest
	mediaType string
	known     bool            // parsed by a registered handler
	refs      []digest.Digest // config and layers, or an index's children
	subject   digest.Digest   // OCI subject, "" when none
	size      int64
}

// snapshot is everything a plan is built from: one read of the repository.
type snapshot struct {
	repo      string
	tags      map[string]digest.Digest          // tag -> current manifest
	tagIndex  map[digest.Digest][]string        // manifest -> tags whose history lists it
	revisions map[digest.Digest]*manifestInfo   // manifest revisions
	layers    map[digest.Digest]bool            // layer links
	referrers map[digest.Digest][]digest.Digest // referrer -> subjects in the referrers index
}

func isNotFound(err error) bool {
	var nf storagedriver.PathNotFoundError
	return errors.As(err, &nf)
}

// splitDigest parses the "<alg>/<hex>" of a link path.
func splitDigest(alg, hex string) (digest.Digest, bool) {
	d := digest.NewDigestFromEncoded(digest.Algorithm(alg), hex)
	return d, d.Validate() == nil
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
	s := &snapshot{
		repo:      repo,
		tags:      map[string]digest.Digest{},
		tagIndex:  map[digest.Digest][]string{},
		revisions: map[digest.Digest]*manifestInfo{},
		layers:    map[digest.Digest]bool{},
		referrers: map[digest.Digest][]digest.Digest{},
	}
	var tagNames []string
	mroot := manifestsPath(repo) + "/"
	foundManifests := true
	// Directories that should hold a revision link or a tag's current link:
	// one where the walk saw no link file is probed below, because Walk
	// leaves out an entry it cannot stat (a dangling symlink).
	revDirs := map[digest.Digest]string{}
	currentDirs := map[string]string{}
	tagSeen := map[string]bool{}
	err := d.Walk(ctx, manifestsPath(repo), func(fi storagedriver.FileInfo) error {
		c := strings.Split(strings.TrimPrefix(fi.Path(), mroot), "/")
		if fi.IsDir() {
			switch {
			case len(c) == 3 && c[0] == "revisions":
				if dg, ok := splitDigest(c[1], c[2]); ok {
					revDirs[dg] = fi.Path() + "/link"
				}
			case len(c) == 3 && c[0] == "tags" && c[2] == "current":
				currentDirs[c[1]] = fi.Path() + "/link"
			case len(c) == 4 && c[0] == "revisions" && c[3] == "link",
				len(c) == 4 && c[0] == "tags" && c[2] == "current" && c[3] == "link":
				// Fail closed: this could be the tag or the revision that
				// keeps everything else.
				return fmt.Errorf("%s: %w: a directory", fi.Path(), errNotALink)
			}
			return nil
		}
		if !strings.HasSuffix(fi.Path(), "/link") {
			return nil
		}
		switch {
		case len(c) == 4 && c[0] == "revisions":
			if dg, ok := splitDigest(c[1], c[2]); ok {
				s.revisions[dg] = &manifestInfo{digest: dg}
			}
		case len(c) == 4 && c[0] == "tags" && c[2] == "current":
			tagNames = append(tagNames, c[1])
			tagSeen[c[1]] = true
		case len(c) == 6 && c[0] == "tags" && c[2] == "index":
			if dg, ok := splitDigest(c[3], c[4]); ok {
				s.tagIndex[dg] = append(s.tagIndex[dg], c[1])
			}
		case len(c) == 6 && c[0] == "referrers":
			sub, ok1 := splitDigest(c[1], c[2])
			ref, ok2 := splitDigest(c[3], c[4])
			if ok1 && ok2 {
				s.referrers[ref] = append(s.referrers[ref], sub)
			}
		}
		return nil
	})
	absent, err := walkEnd(ctx, d, manifestsPath(repo), err)
	if err != nil {
		return nil, abort(AbortStorageUnreadable, fmt.Errorf("walk manifests of %s: %w", repo, err))
	}
	foundManifests = !absent
	for _, dg := range sortedDigests(revDirs) {
		if _, ok := s.revisions[dg]; ok {
			continue
		}
		present, err := probeLink(ctx, d, revDirs[dg])
		if err != nil {
			return nil, abort(AbortStorageUnreadable, fmt.Errorf("revision %s of %s: %w", dg, repo, err))
		}
		if present { // written since the walk passed
			s.revisions[dg] = &manifestInfo{digest: dg}
		}
	}
	for tag, p := range currentDirs {
		if tagSeen[tag] {
			continue
		}
		present, err := probeLink(ctx, d, p)
		if err != nil {
			return nil, abort(AbortStorageUnreadable, fmt.Errorf("tag %s:%s: %w", repo, tag, err))
		}
		if present {
			tagNames = append(tagNames, tag)
		}
	}
	lroot := layersPath(repo) + "/"
	err = d.Walk(ctx, layersPath(repo), func(fi storagedriver.FileInfo) error {
		if fi.IsDir() || !strings.HasSuffix(fi.Path(), "/link") {
			return nil
		}
		c := strings.Split(strings.TrimPrefix(fi.Path(), lroot), "/")
		if len(c) == 3 {
			if dg, ok := splitDigest(c[0], c[1]); ok {
				s.layers[dg] = true
			}
		}
		return nil
	})
	absent, err = walkEnd(ctx, d, layersPath(repo), err)
	if err != nil {
		return nil, abort(AbortStorageUnreadable, fmt.Errorf("walk layers of %s: %w", repo, err))
	}
	if absent && !foundManifests {
		return nil, fmt.Errorf("%w: %s", ErrRepositoryNotFound, repo)
	}

	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(readConcurrency)
	for _, tag := range tagNames {
		g.Go(func() error {
			dg, err := readLink(gctx, d, tagCurrentPath(repo, tag))
			if isNotFound(err) {
				return nil // the tag was deleted while we walked
			}
			if err != nil {
				return abort(AbortStorageUnreadable, fmt.Errorf("read tag %s:%s: %w", repo, tag, err))
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
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return s, nil
}

// readTags re-reads every tag's current link; the sweep uses it right
// before deleting manifests.
func readTags(ctx context.Context, d storagedriver.StorageDriver, repo string) (map[digest.Digest][]string, error) {
	names, err := d.List(ctx, tagsPath(repo))
	if isNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[digest.Digest][]string{}
	for _, n := range names {
		tag := n[strings.LastIndex(n, "/")+1:]
		p := tagCurrentPath(repo, tag)
		dg, err := readLink(ctx, d, p)
		if isNotFound(err) {
			// Deleted since the listing, unless the link entry is still
			// there and cannot be read (a dangling symlink): not "untagged".
			present, perr := probeLink(ctx, d, p)
			if perr != nil {
				return nil, fmt.Errorf("tag %s: %w", tag, perr)
			}
			if !present {
				continue
			}
			if dg, err = readLink(ctx, d, p); err != nil {
				return nil, err
			}
		}
		if err != nil {
			return nil, err
		}
		out[dg] = append(out[dg], tag)
	}
	return out, nil
}

// errNotALink: something sits at a link path that is not a link file.
var errNotALink = errors.New("not a link file")

// probeLink looks at link path p by listing its directory, for when a walk or
// a read did not find a file there. It is false when the listing has no such
// entry (or no directory); true when a file is there now. An entry that is a
// directory, or that the listing shows but Stat does not find (a dangling
// symlink, which Walk leaves out), is an error wrapping errNotALink: never
// "absent".
func probeLink(ctx context.Context, d storagedriver.StorageDriver, p string) (bool, error) {
	for round := 0; ; round++ {
		if ok, err := listed(ctx, d, p); err != nil || !ok {
			return false, err
		}
		fi, err := d.Stat(ctx, p)
		switch {
		case isNotFound(err) && round == 0:
			// Deleted (perhaps re-created) between the listing and
			// the stat, or there to stay: look once more.
			continue
		case isNotFound(err):
			return false, fmt.Errorf("%s: %w: listed, but not found by stat (a dangling symlink?)", p, errNotALink)
		case err != nil:
			return false, err
		case fi.IsDir():
			return false, fmt.Errorf("%s: %w: a directory", p, errNotALink)
		}
		return true, nil
	}
}

// listed reports whether the listing of p's directory names p.
func listed(ctx context.Context, d storagedriver.StorageDriver, p string) (bool, error) {
	names, err := d.List(ctx, path.Dir(p))
	if isNotFound(err) {
		return false, nil
	}
	return slices.Contains(names, p), err
}

func readLink(ctx context.Context, d storagedriver.StorageDriver, p string) (digest.Digest, error) {
	b, err := d.GetContent(ctx, p)
	if err != nil {
		return "", err
	}
	dg, err := digest.Parse(strings.TrimSpace(string(b)))
	if err != nil {
		return "", fmt.Errorf("link %s: %w", p, err)
	}
	return dg, nil
}

// readManifest reads and parses one revision. Unknown media types are not an
// error (the manifest is kept); anything unreadable or unparsable is.
func readManifest(ctx context.Context, d storagedriver.StorageDriver, m *manifestInfo) error {
	b, err := d.GetContent(ctx, blobDataPath(m.digest))
	if err != nil {
		return abort(AbortManifestUnreadable, fmt.Errorf("read manifest %s: %w", m.digest, err))
	}
	if m.digest.Algorithm().FromBytes(b) != m.digest {
		return abort(AbortManifestUnreadable, fmt.Errorf("manifest %s: content does not match its digest", m.digest))
	}
	m.size = int64(len(b))
	return parseManifest(m, b)
}

func parseManifest(m *manifestInfo, b []byte) error {
	var v struct {
		SchemaVersion int              `json:"schemaVersion"`
		MediaType     string           `json:"mediaType"`
		Subject       *v1.Descriptor   `json:"subject"`
		Manifests     *json.RawMessage `json:"manifests"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return abort(AbortManifestUnreadable, fmt.Errorf("manifest %s: %w", m.digest, err))
	}
	mt := v.MediaType
	if v.SchemaVersion == 2 && mt == "" {
		// OCI allows the media type to be absent; decide as Distribution does.
		mt = v1.MediaTypeImageManifest
		if v.Manifests != nil {
			mt = v1.MediaTypeImageIndex
		}
	}
	m.mediaType = mt
	if !knownMediaTypes[mt] || v.SchemaVersion != 2 {
		return nil // unknown: kept and reported, never guessed at
	}
	parsed, _, err := distribution.UnmarshalManifest(mt, b)
	if err != nil {
		return abort(AbortManifestUnreadable, fmt.Errorf("manifest %s: %w", m.digest, err))
	}
	m.known = true
	for _, r := range parsed.References() {
		if r.Digest.Validate() != nil {
			return abort(AbortManifestUnreadable, fmt.Errorf("manifest %s: invalid reference %q", m.digest, r.Digest))
		}
		m.refs = append(m.refs, r.Digest)
	}
	if v.Subject != nil {
		if v.Subject.Digest.Validate() != nil {
			return abort(AbortManifestUnreadable, fmt.Errorf("manifest %s: invalid subject %q", m.digest, v.Subject.Digest))
		}
		m.subject = v.Subject.Digest
	}
	return nil
}

func sortedDigests[V any](m map[digest.Digest]V) []digest.Digest {
	out := make([]digest.Digest, 0, len(m))
	for d := range m {
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
