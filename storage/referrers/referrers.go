package referrers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/distribution/reference"
	"github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"golang.org/x/sync/errgroup"
)

// Errors returned by Index. Callers branch on them with errors.Is.
var (
	// ErrInvalid: the caller passed a repository name, digest or
	// descriptor that cannot be stored. Nothing was written.
	ErrInvalid = errors.New("referrers: invalid referrers index entry")
	// ErrCorruptReferrer: an index file exists but does not hold a valid
	// descriptor for the referrer its path names. The index is rebuildable.
	ErrCorruptReferrer = errors.New("referrers: corrupt referrers index entry")
)

// maxReferrerEntry bounds one index file. A descriptor is a few hundred
// bytes; the cap only guards against reading something that is not one.
const maxReferrerEntry = 1 << 20

// listConcurrency bounds the parallel reads of one query: enough to hide the
// latency of an object store, small enough not to flood it.
const listConcurrency = 16

// Index is the subject -> referrers index of every repository stored in
// one storage driver. It is safe for concurrent use.
type Index struct {
	driver storagedriver.StorageDriver
}

// New returns the referrers index kept in d. Pass the raw driver, or
// a context marked WithoutAccessRecords: index files are Reclaim's own
// bookkeeping, not content a client accessed.
func New(d storagedriver.StorageDriver) *Index {
	return &Index{driver: d}
}

// Add records that referrer (desc.Digest) in repo names subject as its
// subject. Adding an entry that exists overwrites it with desc.
func (r *Index) Add(ctx context.Context, repo string, subject digest.Digest, desc v1.Descriptor) error {
	p, err := referrerEntryPath(repo, subject, desc.Digest)
	if err != nil {
		return err
	}
	if desc.MediaType == "" || desc.Size < 0 {
		return fmt.Errorf("%w: descriptor of %s needs a mediaType and a size", ErrInvalid, desc.Digest)
	}
	// Only the fields the referrers API returns: a manifest's data field or
	// URLs have no business in the index.
	b, err := json.Marshal(v1.Descriptor{
		MediaType:    desc.MediaType,
		Digest:       desc.Digest,
		Size:         desc.Size,
		ArtifactType: desc.ArtifactType,
		Annotations:  desc.Annotations,
	})
	if err != nil {
		return fmt.Errorf("encode referrer %s: %w", desc.Digest, err)
	}
	if err := r.driver.PutContent(ctx, p, b); err != nil {
		return fmt.Errorf("add referrer %s of %s in %s: %w", desc.Digest, subject, repo, err)
	}
	return nil
}

// Remove forgets that referrer in repo names subject. An entry that is
// already gone is not an error.
func (r *Index) Remove(ctx context.Context, repo string, subject, referrer digest.Digest) error {
	p, err := referrerEntryPath(repo, subject, referrer)
	if err != nil {
		return err
	}
	// Delete the referrer's directory, not only its link, so that no empty
	// directories pile up on drivers that have them.
	err = r.driver.Delete(ctx, path.Dir(p))
	if err != nil && !isReferrerPathNotFound(err) {
		return fmt.Errorf("remove referrer %s of %s in %s: %w", referrer, subject, repo, err)
	}
	return nil
}

// followRounds bounds Follow's look-act-look rounds. Each extra round
// needs a writer of the revision link that ran between two looks; more
// than a few in a row is a link flapping under a hot loop, not a race.
const followRounds = 8

// ErrUnsettled: Follow saw the revision link change after each of its
// updates, followRounds times in a row. The entry may disagree with the
// link; the writer that changed it last follows it too, else rebuild does.
var ErrUnsettled = errors.New("referrers: the revision link kept changing while its index entry followed it")

// Follow makes the entry of referrer desc under subject in repo agree with
// the referrer's revision link as it is now: present while the link is,
// absent once it is gone. It looks at the link, updates the entry to what
// it saw, and looks again, until a look agrees with the update before it.
// Every writer of a revision link (a PUT, a DELETE, a restore) follows it
// after its own write, so whichever updates the entry last looked at the
// link after every link write before it: the entry ends as the link does.
// A single look-then-update would not: a writer that looked, then paused,
// would put back an entry for a link removed meanwhile (or remove one for a
// link written meanwhile). It reports whether the link was there at the end.
func (r *Index) Follow(ctx context.Context, repo string, subject digest.Digest, desc v1.Descriptor) (linked bool, err error) {
	if _, err := referrerEntryPath(repo, subject, desc.Digest); err != nil {
		return false, err
	}
	if linked, err = r.linked(ctx, layout.RevisionLinkPath(repo, desc.Digest)); err != nil {
		return false, err
	}
	return r.FollowFrom(ctx, repo, subject, desc, linked)
}

// FollowFrom is Follow for a writer that knows the link as its own write
// left it (a PUT that just wrote it: linked; a DELETE that just removed
// it: not): it updates the entry to that first and looks after, which
// saves Follow's first look. The update still comes after the writer's own
// link write, which is all Follow's argument needs.
func (r *Index) FollowFrom(ctx context.Context, repo string, subject digest.Digest, desc v1.Descriptor, linked bool) (bool, error) {
	link := layout.RevisionLinkPath(repo, desc.Digest)
	for range followRounds {
		var err error
		if linked {
			err = r.Add(ctx, repo, subject, desc)
		} else {
			err = r.Remove(ctx, repo, subject, desc.Digest)
		}
		if err != nil {
			return linked, err
		}
		now, err := r.linked(ctx, link)
		if err != nil {
			return linked, err
		}
		if now == linked {
			return linked, nil
		}
		linked = now
	}
	return linked, fmt.Errorf("%w: %s of %s in %s", ErrUnsettled, desc.Digest, subject, repo)
}

// linked reports whether the revision link at p exists.
func (r *Index) linked(ctx context.Context, p string) (bool, error) {
	_, err := r.driver.Stat(ctx, p)
	if isReferrerPathNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("look at revision link %s: %w", p, err)
	}
	return true, nil
}

// List returns every referrer of subject in repo, sorted by digest. A subject
// without referrers (or a repository that does not exist) has an empty list.
func (r *Index) List(ctx context.Context, repo string, subject digest.Digest) ([]v1.Descriptor, error) {
	descs, _, err := r.Page(ctx, repo, subject, PageOptions{})
	return descs, err
}

// PageOptions selects one page of a referrers listing.
type PageOptions struct {
	// After, if set, skips every referrer whose digest sorts at or before it
	// (the last digest of the previous page).
	After digest.Digest
	// Limit is the most referrers to return; 0 means no limit.
	Limit int
	// ArtifactType, if set, keeps only referrers of that artifact type.
	ArtifactType string
}

// Page returns up to opts.Limit referrers of subject in repo, sorted by
// digest, and whether more follow. Entries are read in sorted order and the
// read stops once the page is full, so a page costs one List per digest
// algorithm plus about one GetContent per referrer it returns (more when an
// artifactType filter drops entries).
func (r *Index) Page(ctx context.Context, repo string, subject digest.Digest, opts PageOptions) ([]v1.Descriptor, bool, error) {
	dir, err := referrerSubjectDir(repo, subject)
	if err != nil {
		return nil, false, err
	}
	if opts.Limit < 0 {
		return nil, false, fmt.Errorf("%w: negative page size %d", ErrInvalid, opts.Limit)
	}
	digests, err := r.digests(ctx, dir)
	if err != nil {
		return nil, false, fmt.Errorf("list referrers of %s in %s: %w", subject, repo, err)
	}
	if opts.After != "" {
		i, found := slices.BinarySearch(digests, opts.After)
		if found {
			i++
		}
		digests = digests[i:]
	}

	var page []v1.Descriptor
	// Read in batches so an unfiltered page reads only what it returns, and
	// a filtered one reads just enough to fill itself.
	for len(digests) > 0 {
		want := len(digests)
		if opts.Limit > 0 {
			want = min(want, opts.Limit-len(page))
		}
		batch := digests[:want]
		digests = digests[want:]
		descs, err := r.read(ctx, dir, batch)
		if err != nil {
			return nil, false, fmt.Errorf("list referrers of %s in %s: %w", subject, repo, err)
		}
		for _, d := range descs {
			if d == nil || (opts.ArtifactType != "" && d.ArtifactType != opts.ArtifactType) {
				continue
			}
			page = append(page, *d)
		}
		if opts.Limit > 0 && len(page) == opts.Limit {
			// With a filter, the rest may all be filtered out: answering
			// "more" then costs the client one empty page, which is cheaper
			// than reading on to find out.
			return page, len(digests) > 0, nil
		}
	}
	return page, false, nil
}

// digests lists the referrer digests below a subject directory, sorted.
func (r *Index) digests(ctx context.Context, dir string) ([]digest.Digest, error) {
	algs, err := r.driver.List(ctx, dir)
	if isReferrerPathNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []digest.Digest
	for _, a := range algs {
		alg := digest.Algorithm(path.Base(a))
		entries, err := r.driver.List(ctx, a)
		if isReferrerPathNotFound(err) {
			continue // removed since the first listing
		}
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			d := digest.NewDigestFromEncoded(alg, path.Base(e))
			if d.Validate() != nil {
				// Not ours (a stray file): skipping it cannot hide a referrer
				// that was written through Add.
				continue
			}
			out = append(out, d)
		}
	}
	slices.Sort(out)
	return out, nil
}

// read reads the index entries of digests in parallel. An entry removed
// between listing and reading is nil in the result.
func (r *Index) read(ctx context.Context, dir string, digests []digest.Digest) ([]*v1.Descriptor, error) {
	out := make([]*v1.Descriptor, len(digests))
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(listConcurrency)
	for i, d := range digests {
		g.Go(func() error {
			p := path.Join(dir, d.Algorithm().String(), d.Encoded(), "link")
			b, err := r.driver.GetContent(ctx, p)
			if isReferrerPathNotFound(err) {
				return nil
			}
			if err != nil {
				return err
			}
			var desc v1.Descriptor
			if len(b) > maxReferrerEntry || json.Unmarshal(b, &desc) != nil || desc.Digest != d || desc.MediaType == "" {
				return fmt.Errorf("%w: %s", ErrCorruptReferrer, p)
			}
			out[i] = &desc
			return nil
		})
	}
	return out, g.Wait()
}

// referrerSubjectDir is ReferrersDir for input that comes straight from a
// URL or a manifest: it refuses what would not classify as a referrer link.
func referrerSubjectDir(repo string, subject digest.Digest) (string, error) {
	if _, err := reference.WithName(repo); err != nil {
		return "", fmt.Errorf("%w: repository name %q: %v", ErrInvalid, repo, err)
	}
	if err := subject.Validate(); err != nil {
		return "", fmt.Errorf("%w: subject %q: %v", ErrInvalid, subject, err)
	}
	return layout.ReferrersDir(repo, subject), nil
}

// referrerEntryPath is the index file of (subject, referrer) in repo.
func referrerEntryPath(repo string, subject, referrer digest.Digest) (string, error) {
	if _, err := referrerSubjectDir(repo, subject); err != nil {
		return "", err
	}
	if err := referrer.Validate(); err != nil {
		return "", fmt.Errorf("%w: referrer %q: %v", ErrInvalid, referrer, err)
	}
	return layout.ReferrerLinkPath(repo, subject, referrer), nil
}

// isReferrerPathNotFound reports a missing path. (Named for this file: the
// package is shared, and paths.go may grow a general helper.)
func isReferrerPathNotFound(err error) bool {
	var nf storagedriver.PathNotFoundError
	return errors.As(err, &nf)
}

// MaxManifestSize is the largest manifest worth parsing for a subject:
// Distribution's own limit for a manifest PUT, so anything larger is not a
// manifest the registry accepted.
const MaxManifestSize = 4 << 20

// manifestHead is the part of an OCI image manifest or image index that the
// referrers index needs.
type manifestHead struct {
	MediaType    string            `json:"mediaType"`
	ArtifactType string            `json:"artifactType"`
	Config       *v1.Descriptor    `json:"config"`
	Manifests    json.RawMessage   `json:"manifests"`
	Subject      *v1.Descriptor    `json:"subject"`
	Annotations  map[string]string `json:"annotations"`
}

// Of returns the referrers index entry of the manifest payload whose
// digest is dgst, and the subject it refers to; ok is false when the manifest
// has no subject. mediaType is the type the manifest was pushed with (its
// Content-Type); the payload's own mediaType field wins when it has one.
//
// The entry follows the OCI distribution spec: artifactType is the
// manifest's artifactType or, for an image manifest without one, its config
// media type; annotations are the manifest's. A payload that is not a JSON
// manifest is an error wrapping ErrInvalid, never "no subject".
func Of(payload []byte, dgst digest.Digest, mediaType string) (subject digest.Digest, desc v1.Descriptor, ok bool, err error) {
	var m manifestHead
	if err := json.Unmarshal(payload, &m); err != nil {
		return "", desc, false, fmt.Errorf("%w: manifest %s: %v", ErrInvalid, dgst, err)
	}
	if m.Subject == nil {
		return "", desc, false, nil
	}
	if err := m.Subject.Digest.Validate(); err != nil {
		return "", desc, false, fmt.Errorf("%w: manifest %s: subject %q: %v", ErrInvalid, dgst, m.Subject.Digest, err)
	}
	desc = v1.Descriptor{
		MediaType:    m.MediaType,
		Digest:       dgst,
		Size:         int64(len(payload)),
		ArtifactType: m.ArtifactType,
		Annotations:  m.Annotations,
	}
	if desc.MediaType == "" {
		desc.MediaType = mediaType
	}
	if desc.MediaType == "" {
		// Neither the payload nor the caller says; the shape does.
		switch {
		case m.Manifests != nil:
			desc.MediaType = v1.MediaTypeImageIndex
		case m.Config != nil:
			desc.MediaType = v1.MediaTypeImageManifest
		default:
			return "", desc, false, fmt.Errorf("%w: manifest %s has a subject but no media type", ErrInvalid, dgst)
		}
	}
	// An index has no config: its artifactType stays empty when unset.
	if desc.ArtifactType == "" && m.Config != nil && m.Manifests == nil {
		desc.ArtifactType = m.Config.MediaType
	}
	return m.Subject.Digest, desc, true, nil
}
