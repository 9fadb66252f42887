package storage

import (
	"context"
	"errors"
	"fmt"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/opencontainers/go-digest"
)

// RepoLink names one forward link to a blob: repository Repo links it as a
// layer (LinkLayer) or as a manifest revision (LinkManifest).
type RepoLink struct {
	Repo string
	Kind LinkKind
}

// ReverseLinks reads and writes the reverse links stored next to each blob:
// blobs/<alg>/<hex[:2]>/<hex>/_repositories/<repo>/<kind>/link, whose content
// is the blob digest (the same format as Distribution's own link files).
//
// It works on whatever driver it is given; the middleware gives it the driver
// below itself, so its writes are not classified again.
type ReverseLinks struct {
	driver storagedriver.StorageDriver
}

// NewReverseLinks returns the reverse-link store on d.
func NewReverseLinks(d storagedriver.StorageDriver) *ReverseLinks {
	return &ReverseLinks{driver: d}
}

// List returns every repository link recorded for blob. A blob with no
// reverse links (or no directory at all) has none; any other error is
// returned, never an empty list: callers decide deletions from this.
func (r *ReverseLinks) List(ctx context.Context, blob digest.Digest) ([]RepoLink, error) {
	if err := blob.Validate(); err != nil {
		return nil, fmt.Errorf("reverse links of %q: %w", blob, err)
	}
	var out []RepoLink
	err := r.driver.Walk(ctx, ReverseLinksDir(blob), func(fi storagedriver.FileInfo) error {
		if fi.IsDir() {
			return nil
		}
		p := Classify(fi.Path())
		if p.Kind == KindReverseLink && p.Digest == blob {
			out = append(out, RepoLink{Repo: p.Repo, Kind: p.LinkKind})
		}
		return nil
	})
	if errors.As(err, new(storagedriver.PathNotFoundError)) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reverse links of %s: %w", blob, err)
	}
	return out, nil
}

// Has reports whether the reverse link (blob, l) exists.
func (r *ReverseLinks) Has(ctx context.Context, blob digest.Digest, l RepoLink) (bool, error) {
	_, err := r.driver.Stat(ctx, ReverseLinkPath(blob, l.Repo, l.Kind))
	if errors.As(err, new(storagedriver.PathNotFoundError)) {
		return false, nil
	}
	return err == nil, err
}

// Put records that l.Repo links blob. It is idempotent.
func (r *ReverseLinks) Put(ctx context.Context, blob digest.Digest, l RepoLink) error {
	if err := checkLink(blob, l); err != nil {
		return err
	}
	if err := r.driver.PutContent(ctx, ReverseLinkPath(blob, l.Repo, l.Kind), []byte(blob)); err != nil {
		return fmt.Errorf("write reverse link %s <- %s %s: %w", blob, l.Repo, l.Kind, err)
	}
	return nil
}

// Delete removes the reverse link; one already gone counts as deleted. It
// deletes the link's directory so that no empty directories pile up.
func (r *ReverseLinks) Delete(ctx context.Context, blob digest.Digest, l RepoLink) error {
	if err := checkLink(blob, l); err != nil {
		return err
	}
	p := ReverseLinksDir(blob) + "/" + l.Repo + "/" + string(l.Kind)
	err := r.driver.Delete(ctx, p)
	if err != nil && !errors.As(err, new(storagedriver.PathNotFoundError)) {
		return fmt.Errorf("delete reverse link %s <- %s %s: %w", blob, l.Repo, l.Kind, err)
	}
	return nil
}

// ErrInvalidLink is returned for a reverse link with a bad digest, repository
// name or kind.
var ErrInvalidLink = errors.New("storage: invalid link")

func checkLink(blob digest.Digest, l RepoLink) error {
	if blob.Validate() != nil || !validRepo(l.Repo) || (l.Kind != LinkLayer && l.Kind != LinkManifest) {
		return fmt.Errorf("%w: %s <- %q %q", ErrInvalidLink, blob, l.Repo, l.Kind)
	}
	return nil
}
