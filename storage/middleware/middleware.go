package middleware

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/linkdb"
)

// driver is the "reclaim" storage-driver middleware. It embeds the driver
// below it and overrides only the calls that read or change links and blob
// data; everything else (uploads, walks, lists) passes straight through.
//
// The fence checks and access records are in accessrecord.go, the link writes
// and unlinks in links.go.
type driver struct {
	storagedriver.StorageDriver
	env   *Env
	links *linkdb.ReverseLinks // on the driver below: our own writes are not re-classified
}

var _ storagedriver.StorageDriver = (*driver)(nil)

// wrap returns the reclaim middleware around next, recording into env.
func wrap(next storagedriver.StorageDriver, env *Env) storagedriver.StorageDriver {
	return &driver{StorageDriver: next, env: env, links: linkdb.NewReverseLinks(next)}
}

func isLink(k layout.PathKind) bool {
	return k == layout.PathLayerLink || k == layout.PathRevisionLink
}

func isLinkOrData(k layout.PathKind) bool {
	return isLink(k) || k == layout.PathBlobData
}

// checked runs call, a read of the link or blob data path p, between the
// fence check and the access record its request needs (before, after).
func checked[T any](ctx context.Context, d *driver, path string, p layout.Path, call func() (T, error)) (T, error) {
	var zero T
	readAfter, err := d.before(ctx, path, p)
	if err != nil {
		return zero, err
	}
	v, err := call()
	if err == nil && readAfter {
		if err := d.after(ctx, path, p); err != nil {
			return zero, err
		}
	}
	return v, err
}

// GetContent reads links (pull, manifest verification, mount source) and
// small blobs (manifests).
func (d *driver) GetContent(ctx context.Context, path string) ([]byte, error) {
	p := layout.Classify(path)
	if !isLinkOrData(p.Kind) {
		return d.StorageDriver.GetContent(ctx, path)
	}
	return checked(ctx, d, path, p, func() ([]byte, error) { return d.StorageDriver.GetContent(ctx, path) })
}

// Stat of blob data is how Distribution checks that a blob exists.
func (d *driver) Stat(ctx context.Context, path string) (storagedriver.FileInfo, error) {
	p := layout.Classify(path)
	if !isLinkOrData(p.Kind) {
		return d.StorageDriver.Stat(ctx, path)
	}
	return checked(ctx, d, path, p, func() (storagedriver.FileInfo, error) { return d.StorageDriver.Stat(ctx, path) })
}

// Reader serves blob content.
func (d *driver) Reader(ctx context.Context, path string, offset int64) (io.ReadCloser, error) {
	p := layout.Classify(path)
	if p.Kind != layout.PathBlobData {
		return d.StorageDriver.Reader(ctx, path, offset)
	}
	r, err := d.StorageDriver.Reader(ctx, path, offset)
	if err == nil {
		if err := d.after(ctx, path, p); err != nil {
			r.Close()
			return nil, err
		}
		d.notePull(ctx, p.Digest) // a manifest GET reads its manifest here (Distribution's getContent)
	}
	return r, err
}

// RedirectURL hands the client a URL to the blob; only the outermost storage
// middleware sees it, so list reclaim last when it is combined with others.
func (d *driver) RedirectURL(r *http.Request, path string) (string, error) {
	u, err := d.StorageDriver.RedirectURL(r, path)
	if err != nil || u == "" {
		return u, err // no redirect (the filesystem driver): Reader serves, and records
	}
	if p := layout.Classify(path); p.Kind == layout.PathBlobData {
		if err := d.after(r.Context(), path, p); err != nil {
			return "", err
		}
	}
	return u, nil
}

// PutContent: a forward link write is preceded by the fence check and the
// reverse link; blob data written whole (manifests) is fence-checked.
func (d *driver) PutContent(ctx context.Context, path string, content []byte) error {
	p := layout.Classify(path)
	switch p.Kind {
	case layout.PathLayerLink, layout.PathRevisionLink:
		err := d.putLink(ctx, path, p, content)
		if err != nil {
			d.linked(ctx, p.Digest, err) // else when its look ends
		}
		return err
	case layout.PathTagIndex:
		d.startTagCheck(ctx, p.Repo, p.Digest) // the current link comes next
	case layout.PathTagCurrent:
		// the revision link's look first: a link it withdrew keeps the
		// tag's old value (deferred.go)
		deleted, err := scopeOf(ctx).joinLooks()
		var checked time.Time
		if err == nil {
			checked, err = d.tagTarget(ctx, p.Repo, content, deleted)
		}
		if err != nil {
			// Distribution wrote the tag's index entry first: a new
			// tag must not be left as a directory without a current link
			d.clearTagLeftovers(ctx, p.Repo, p.Tag)
			return err
		}
		if err := d.StorageDriver.PutContent(ctx, path, content); err != nil {
			return err
		}
		return d.tagWritten(ctx, path, p, content, checked)
	case layout.PathBlobData:
		return d.writeBlobData(ctx, p.Digest, func() error { return d.StorageDriver.PutContent(ctx, path, content) })
	}
	return d.StorageDriver.PutContent(ctx, path, content)
}

// Move into blob data is an upload commit.
func (d *driver) Move(ctx context.Context, src, dst string) error {
	if p := layout.Classify(dst); p.Kind == layout.PathBlobData {
		return d.writeBlobData(ctx, p.Digest, func() error { return d.StorageDriver.Move(ctx, src, dst) })
	}
	return d.StorageDriver.Move(ctx, src, dst)
}

// writeBlobData is an upload commit or a manifest written whole: it is
// fence-checked, and the blob is reviewed later unless it gets linked
// (committed).
func (d *driver) writeBlobData(ctx context.Context, blob digest.Digest, write func() error) error {
	// A tombstone needs no answer: this writes the data.
	if _, err := d.guard(ctx, blob, extra(requestOf(ctx), blob)); err != nil {
		return err
	}
	if err := write(); err != nil {
		// The data may be there all the same: S3's Move is a copy and a
		// delete, and the copy can land before an error (the source's
		// delete failed, or the request was cancelled before the answer
		// came). Nothing would link it: queue it for review, which drops
		// it if nothing is there or something links it by then.
		d.env.enqueue(ctx, "commit", blob)
		return err
	}
	d.committed(ctx, blob)
	return nil
}

// Delete removes reverse links after the forward links are gone, and leaves
// tombstones so stale blob-descriptor cache entries stop answering. The
// tombstones are written before the delete too: when Redis cannot take
// them, nothing is deleted (a stale cache entry would answer "exists" for
// something gone) and the caller gets a retryable error.
func (d *driver) Delete(ctx context.Context, path string) error {
	p := layout.Classify(path)
	switch {
	case cacheOnly(ctx) && isLink(p.Kind):
		// Distribution's statter Clear after a cache entry was dropped
		// (descriptors.go): the link itself stays.
		return nil
	case p.Kind == layout.PathBlobData || p.Kind == layout.PathBlobDir:
		return d.deleteBlob(ctx, path, p.Digest)
	}
	if m, ok := untagged(ctx, p); ok {
		return d.untag(ctx, path, p, m)
	}
	links, err := d.linksDeletedWith(ctx, path, p)
	if err != nil {
		return err
	}
	for _, l := range links {
		if err := d.env.Evict(ctx, linkObject(l)); err != nil {
			return fmt.Errorf("%w: delete %s: %w", ErrRetryable, path, err)
		}
	}
	err = d.StorageDriver.Delete(ctx, path)
	if err != nil && !errors.As(err, new(storagedriver.PathNotFoundError)) {
		return err
	}
	// Also after "not found": an earlier attempt may have removed the
	// forward link and then failed before its reverse link.
	for _, l := range links {
		d.unlink(ctx, l)
	}
	return err
}

func (d *driver) deleteBlob(ctx context.Context, path string, blob digest.Digest) error {
	o := reclaim.Object{Blob: blob}
	if err := d.env.Evict(ctx, o); err != nil {
		return fmt.Errorf("%w: delete %s: %w", ErrRetryable, path, err)
	}
	err := d.StorageDriver.Delete(ctx, path)
	if err == nil {
		d.markGone(ctx, o)
	}
	return err
}
