package linkdb

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// ReverseLinks reads and writes the reverse links stored next to each blob:
// blobs/<alg>/<hex[:2]>/<hex>/_repositories/<repo>/<kind>/link, whose content
// is the blob digest (the same format as Distribution's own link files).
//
// It works on whatever driver it is given; the middleware gives it the driver
// below itself, so its writes are not classified again.
type ReverseLinks struct {
	driver storagedriver.StorageDriver
	writer linkWriter // Put's: the driver, durable per write, but in a rebuild
}

// NewReverseLinks returns the reverse-link store on d.
func NewReverseLinks(d storagedriver.StorageDriver) *ReverseLinks {
	return &ReverseLinks{driver: d, writer: driverWriter{d}}
}

// ErrMalformedLink means something sits at a reverse link path that is not a
// well-formed link file: a directory, a dangling entry, or a file whose
// content is not exactly the blob digest. It is never "absent".
var ErrMalformedLink = errors.New("linkdb: malformed reverse link")

// reverseLinkOf returns the link p is the reverse link path (or the trash
// hold path) of, for blob.
func reverseLinkOf(blob digest.Digest, p string) (reclaim.RepoLink, bool) {
	c := layout.Classify(p)
	switch {
	case c.Digest != blob:
		return reclaim.RepoLink{}, false
	case c.Kind == layout.PathReverseLink:
		return reclaim.RepoLink{Repo: c.Repo, Kind: c.LinkKind}, true
	case c.Kind == layout.PathTrashHold:
		return reclaim.RepoLink{Kind: reclaim.LinkTrash, Hold: c.Hold}, true
	}
	return reclaim.RepoLink{}, false
}

// linkPath is where l of blob is stored.
func linkPath(blob digest.Digest, l reclaim.RepoLink) string {
	if l.Kind == reclaim.LinkTrash {
		return layout.TrashHoldPath(blob, l.Hold)
	}
	return layout.ReverseLinkPath(blob, l.Repo, l.Kind)
}

// List returns every repository link recorded for blob, sorted, and every
// trash hold on it (Kind LinkTrash: it keeps the data too). A blob with
// no reverse links (or no directory at all) has none; any other error is
// returned, never an empty list: callers decide deletions from this.
//
// It lists; it does not read link contents (a blob shared by a thousand
// repositories would cost a thousand reads per check), so any file at a
// link path counts as a link whatever it holds: bad content can only keep a
// blob, and `linkdb verify` reports it. What is at a link path but is not a
// file is returned with Problem set, never skipped: a directory, or a
// "<kind>/link" entry that the listing of its directory shows and Stat does
// not (a dangling symlink, which the driver's Walk silently leaves out).
func (r *ReverseLinks) List(ctx context.Context, blob digest.Digest) ([]reclaim.RepoLink, error) {
	return r.list(ctx, blob, func(reclaim.RepoLink) bool { return false })
}

// ListFor returns what decides whether repo may let blob go. When another
// repository links the blob, the walk stops at the first such link it
// meets (a link file, or something else at a link path, with Problem set)
// and returns it with what it met before: one other link keeps the blob,
// and the cost does not grow with the number of repositories that link it.
// Otherwise it returns every link, as List. With repo "" it stops at the
// first link of any repository. Trash holds never stop the walk: a
// caller told "in the trash" must not miss another repository's link.
func (r *ReverseLinks) ListFor(ctx context.Context, blob digest.Digest, repo string) ([]reclaim.RepoLink, error) {
	return r.list(ctx, blob, func(l reclaim.RepoLink) bool { return l.Kind != reclaim.LinkTrash && l.Repo != repo })
}

// list walks blob's reverse links until stop says a link found is enough.
func (r *ReverseLinks) list(ctx context.Context, blob digest.Digest, stop func(reclaim.RepoLink) bool) ([]reclaim.RepoLink, error) {
	if err := blob.Validate(); err != nil {
		return nil, fmt.Errorf("reverse links of %q: %w", blob, err)
	}
	found := map[reclaim.RepoLink]string{} // link (without Problem) -> problem
	kindDirs := map[reclaim.RepoLink]bool{}
	err := r.driver.Walk(ctx, layout.ReverseLinksDir(blob), func(fi storagedriver.FileInfo) error {
		p := fi.Path()
		l, ok := reverseLinkOf(blob, p)
		switch {
		case ok && !fi.IsDir():
			found[l] = ""
		case ok:
			found[l] = layout.ProblemDirectory
		}
		if ok && stop(l) {
			return storagedriver.ErrFilledBuffer
		}
		if !fi.IsDir() {
			return nil
		}
		if l, ok := reverseLinkOf(blob, p+"/link"); ok {
			kindDirs[l] = true
		}
		return nil
	})
	if err != nil && !layout.IsNotFound(err) && !errors.Is(err, storagedriver.ErrFilledBuffer) {
		return nil, fmt.Errorf("reverse links of %s: %w", blob, err)
	}
	// A <kind> directory holds only its link file (Delete removes the
	// directory with it). One where the walk saw no link file is looked at
	// again: a link entry that Stat cannot see is not an absent link.
	for l := range kindDirs {
		if _, ok := found[l]; ok {
			continue
		}
		present, problem, err := r.probe(ctx, blob, l)
		if err != nil {
			return nil, fmt.Errorf("reverse links of %s: %w", blob, err)
		}
		if present {
			found[l] = problem
		}
	}
	out := make([]reclaim.RepoLink, 0, len(found))
	for l, problem := range found {
		l.Problem = problem
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Repo != out[j].Repo {
			return out[i].Repo < out[j].Repo
		}
		if out[i].Kind != out[j].Kind {
			return out[i].Kind < out[j].Kind
		}
		return out[i].Hold < out[j].Hold
	})
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// probe looks at the link path of l by listing its directory. present is
// false when the listing has no link entry (a write in flight, an
// interrupted delete) or the directory is gone.
func (r *ReverseLinks) probe(ctx context.Context, blob digest.Digest, l reclaim.RepoLink) (present bool, problem string, err error) {
	present, _, problem, err = layout.Probe(ctx, r.driver, linkPath(blob, l))
	return present, problem, err
}

// LinkState is what Look found at a reverse link path.
type LinkState int

// The states of a reverse link path. The zero value is LinkUnreadable, so
// a state nobody set never reads as "missing".
const (
	// LinkUnreadable: the read failed; what is there is not known.
	LinkUnreadable LinkState = iota
	// LinkMissing: nothing is at the link path.
	LinkMissing
	// LinkPresent: a file holding exactly the blob digest.
	LinkPresent
	// LinkBadContent: a file holding something else.
	LinkBadContent
	// LinkDirectory: a directory, which no single write can replace.
	LinkDirectory
)

// Look reads the reverse link (blob, l) and says what is there. Every
// state but LinkPresent and LinkMissing comes with an error: one wrapping
// ErrMalformedLink for bad content or a directory, the read's own error
// for LinkUnreadable.
func (r *ReverseLinks) Look(ctx context.Context, blob digest.Digest, l reclaim.RepoLink) (LinkState, error) {
	p := layout.ReverseLinkPath(blob, l.Repo, l.Kind)
	b, err := r.driver.GetContent(ctx, p)
	if layout.IsNotFound(err) {
		return LinkMissing, nil
	}
	if err != nil {
		// A directory fails to read on some drivers and lists as a
		// prefix on others; name it when Stat can tell.
		if fi, serr := r.driver.Stat(ctx, p); serr == nil && fi.IsDir() {
			return LinkDirectory, fmt.Errorf("%w: %s is a directory", ErrMalformedLink, p)
		}
		return LinkUnreadable, fmt.Errorf("read reverse link %s: %w", p, err)
	}
	if !WellFormedLink(b, blob) {
		return LinkBadContent, fmt.Errorf("%w: %s holds %s, not %s", ErrMalformedLink, p, describe(b), blob)
	}
	return LinkPresent, nil
}

// Has reports whether a well-formed reverse link (blob, l) is there: a file
// holding exactly the blob digest. It is false only when nothing is at the
// link path. Anything else there (a directory, other content) is an error
// wrapping ErrMalformedLink, and a failed read is an error too: neither may
// be taken for "absent".
func (r *ReverseLinks) Has(ctx context.Context, blob digest.Digest, l reclaim.RepoLink) (bool, error) {
	st, err := r.Look(ctx, blob, l)
	return st == LinkPresent, err
}

// Ensure makes sure the well-formed reverse link (blob, l) is there, and
// writes it only when it is not: a read costs far less than a write (on
// the filesystem driver a write is a temporary file, two fsyncs and a
// rename), and a re-pushed manifest or a re-uploaded layer finds its
// reverse link there already. It returns what it found before it wrote.
//
// It writes whenever it cannot confirm a well-formed link: nothing there,
// other content (replaced in one step, as Put does), or a failed read (fail
// safe: Put alone would have written). A directory at the link path is
// left alone and returned as an error wrapping ErrMalformedLink: no single
// write replaces it, and removing it first would leave the forward link
// without its reverse link.
func (r *ReverseLinks) Ensure(ctx context.Context, blob digest.Digest, l reclaim.RepoLink) (LinkState, error) {
	if err := checkLink(blob, l); err != nil {
		return LinkUnreadable, err
	}
	st, err := r.Look(ctx, blob, l)
	switch st {
	case LinkPresent:
		return st, nil
	case LinkDirectory:
		return st, err
	}
	return st, r.Put(ctx, blob, l)
}

// WellFormedLink reports whether b is the content of a link file to d as
// Distribution writes it: exactly the digest, nothing around it.
func WellFormedLink(b []byte, d digest.Digest) bool { return string(b) == d.String() }

// describe says what a file that should hold a digest (a link, a
// referrers entry) holds, without quoting it: on the filesystem driver a
// link path may be a symlink to any file the process can read (outside the
// storage root too), and a report, a log line or an error must not print
// its bytes. A digest, the only thing worth seeing, is named.
func describe(b []byte) string {
	if d, err := digest.Parse(strings.TrimSpace(string(b))); err == nil {
		if string(b) == d.String() {
			return "the digest " + d.String()
		}
		return fmt.Sprintf("the digest %s with %d bytes around it", d, len(b)-len(d.String()))
	}
	return fmt.Sprintf("%d bytes that are not a digest (not shown)", len(b))
}

// Put records that l.Repo links blob, durably when it returns (but in a
// rebuild, which makes its links durable in batches, see linkWriter). It is
// idempotent, and it replaces whatever file is at the link path
// (PutContent writes atomically on every driver), so it also repairs a
// reverse link with bad content.
func (r *ReverseLinks) Put(ctx context.Context, blob digest.Digest, l reclaim.RepoLink) error {
	if err := checkLink(blob, l); err != nil {
		return err
	}
	if err := r.writer.put(ctx, layout.ReverseLinkPath(blob, l.Repo, l.Kind), []byte(blob)); err != nil {
		return fmt.Errorf("write reverse link %s <- %s %s: %w", blob, l.Repo, l.Kind, err)
	}
	return nil
}

// Delete removes the reverse link; one already gone counts as deleted. It
// deletes the link's directory so that no empty directories pile up.
func (r *ReverseLinks) Delete(ctx context.Context, blob digest.Digest, l reclaim.RepoLink) error {
	if err := checkLink(blob, l); err != nil {
		return err
	}
	p := layout.ReverseLinksDir(blob) + "/" + l.Repo + "/" + string(l.Kind)
	err := r.driver.Delete(ctx, p)
	if err != nil && !layout.IsNotFound(err) {
		return fmt.Errorf("delete reverse link %s <- %s %s: %w", blob, l.Repo, l.Kind, err)
	}
	return nil
}

// ErrInvalidLink is returned for a reverse link with a bad digest, repository
// name or kind.
var ErrInvalidLink = errors.New("linkdb: invalid link")

func checkLink(blob digest.Digest, l reclaim.RepoLink) error {
	if blob.Validate() != nil || !layout.ValidRepo(l.Repo) || (l.Kind != reclaim.LinkLayer && l.Kind != reclaim.LinkManifest) {
		return fmt.Errorf("%w: %s <- %q %q", ErrInvalidLink, blob, l.Repo, l.Kind)
	}
	return nil
}
