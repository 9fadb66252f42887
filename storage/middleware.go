package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/internal/rlog"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/linkdb"
)

// driver is the "reclaim" storage-driver middleware. It embeds the driver
// below it and overrides only the calls that read or change links and blob
// data; everything else (uploads, walks, lists) passes straight through.
type driver struct {
	storagedriver.StorageDriver
	env   *Env
	links *linkdb.ReverseLinks // on the driver below: our own writes are not re-classified
}

var _ storagedriver.StorageDriver = (*driver)(nil)

// Wrap returns the reclaim middleware around next, recording into env.
func Wrap(next storagedriver.StorageDriver, env *Env) storagedriver.StorageDriver {
	return &driver{StorageDriver: next, env: env, links: linkdb.NewReverseLinks(next)}
}

// linkObject is the tracker object of a forward (or reverse) link path.
func linkObject(p layout.Path) layout.Object {
	return layout.Object{Blob: p.Digest, Repo: p.Repo, Kind: p.LinkSet()}
}

// extra returns the objects a request adds to every fence check: the layer
// link an upload commit or a mount is about to write. Checking it together
// with the blob saves the separate round trip the link write would cost.
func extra(info requestInfo, blob digest.Digest) []layout.Object {
	if (info.intent == intentCommit || info.intent == intentMount) && layout.ValidRepo(info.repo) {
		return []layout.Object{{Blob: blob, Repo: info.repo, Kind: layout.LinkLayer}}
	}
	return nil
}

// ErrRetryable marks errors a client should retry (Handler answers 503).
var ErrRetryable = errors.New("storage: retry later")

// guard is the fence check of an operation that will make blob (and links)
// referenced: record access unless fenced. A fence is waited out for up to
// FenceWait; then the operation fails with a retryable error and never
// proceeds.
//
// gone reports a deletion tombstone on one of the objects (descriptors.go).
func (d *driver) guard(ctx context.Context, blob digest.Digest, links []layout.Object) (gone bool, err error) {
	return d.guardWait(ctx, blob, links, d.env.opts.FenceWait)
}

// guardWait is guard with an explicit wait: a mount does not wait (it falls
// back to an upload at once).
//
// A check is reused only within its own request (scope.covered), never from
// the process-wide read dedup: another instance may have deleted a link
// since a pull of this process looked, and only Redis knows (a tombstone).
// Within a request, a check that found no fence and no tombstone set the
// access time, and GC refuses to fence anything accessed within its window,
// so the request's later steps need no second round trip.
func (d *driver) guardWait(ctx context.Context, blob digest.Digest, links []layout.Object, wait time.Duration) (gone bool, err error) {
	if accessRecordsOff(ctx) {
		return false, nil
	}
	if err := d.indexChildren(ctx); err != nil { // a manifest PUT checks its index children first
		return false, err
	}
	objs := append([]layout.Object{{Blob: blob}}, links...)
	s := scopeOf(ctx)
	s.noteLinks(links)
	if s.covered(objs, d.env.opts.Dedup) {
		return false, nil
	}
	deadline := time.Now().Add(wait)
	waited := false
	for {
		start := time.Now()
		gone, err := d.env.Tracker.TouchBlob(ctx, blob, links)
		if err == nil {
			if waited {
				metricFenceWaits.WithLabelValues("cleared").Inc()
			}
			if !gone {
				// a tombstone must be seen by the next check too: only a
				// clean answer is remembered
				s.record(objs, start)
			}
			return gone, nil
		}
		if errors.Is(err, layout.ErrFenced) && time.Now().Before(deadline) {
			waited = true
			select {
			case <-ctx.Done():
				return false, ctx.Err()
			case <-time.After(d.env.opts.FencePoll):
			}
			continue
		}
		s.refuse()
		if errors.Is(err, layout.ErrFenced) {
			metricFenceWaits.WithLabelValues("refused").Inc()
			metricRefusals.WithLabelValues("fenced").Inc()
			rlog.From(ctx).WithField("blob", blob).Info("reclaim: write refused, object is being garbage-collected")
		} else {
			metricRefusals.WithLabelValues("redis").Inc()
		}
		return false, fmt.Errorf("%w: %w", ErrRetryable, err)
	}
}

// read records a pull's access, best effort and deduplicated per process.
// It reports whether the blob or link is fenced (being deleted): the caller
// then answers "not found" instead of serving something half-deleted.
// gone reports a deletion tombstone (see descriptors.go).
func (d *driver) read(ctx context.Context, blob digest.Digest, links []layout.Object) (fenced, gone bool) {
	if accessRecordsOff(ctx) {
		return false, false
	}
	objs := append([]layout.Object{{Blob: blob}}, links...)
	if d.env.dedup.recent(objs) {
		metricTouchesDeduped.Inc()
		return false, false
	}
	start := time.Now()
	gone, err := d.env.Tracker.TouchBlob(ctx, blob, links)
	switch {
	case errors.Is(err, layout.ErrFenced):
		return true, false
	case err != nil:
		// serving comes first: the tracker has noted the gap
		return false, false
	}
	if !gone {
		// never remember a tombstone as "recent": a concurrent read of
		// the same blob must see it too and check the storage
		d.env.dedup.record(objs, start)
	}
	return false, gone
}

// before is the common entry for driver calls on a link or blob data path.
// An operation about to make the object referenced (manifest PUT
// verification, upload commit, mount) is fence-checked before it proceeds.
// A read is recorded after it succeeded (readAfter): reads create no
// references (a later manifest PUT is checked on its own), the access is
// still recorded before the client learns the answer, and a read of
// something that does not exist costs no Redis round trip.
func (d *driver) before(ctx context.Context, path string, p layout.Path) (readAfter bool, err error) {
	info := requestOf(ctx)
	var links []layout.Object
	if p.Kind == layout.KindLayerLink || p.Kind == layout.KindRevisionLink {
		links = []layout.Object{linkObject(p)}
	}
	switch info.intent {
	case intentReference:
		if p.Kind == layout.KindBlobData && layout.ValidRepo(info.repo) && !scopeOf(ctx).reachedByLink(p.Digest) {
			// Blob data a manifest PUT did not reach through a link is the
			// manifest itself (Distribution stats it before writing it and
			// its revision link): check the revision link now too, so the
			// link write that follows needs no round trip of its own.
			links = append(links, layout.Object{Blob: p.Digest, Repo: info.repo, Kind: layout.LinkManifest})
		}
		_, err := d.guard(ctx, p.Digest, links)
		return false, err
	case intentCommit:
		_, err := d.guard(ctx, p.Digest, append(links, extra(info, p.Digest)...))
		return false, err
	case intentMount:
		_, err := d.guardWait(ctx, p.Digest, append(links, extra(info, p.Digest)...), 0)
		if errors.Is(err, layout.ErrFenced) {
			// the mount fails and the client uploads instead; that is no
			// refusal of the request
			if s := scopeOf(ctx); s != nil {
				s.refused.Store(false)
			}
			return false, storagedriver.PathNotFoundError{Path: path, DriverName: "reclaim"}
		}
		return false, err
	}
	return true, nil
}

// after records a successful read; a fenced object answers "not found".
func (d *driver) after(ctx context.Context, path string, p layout.Path) error {
	var links []layout.Object
	if p.Kind == layout.KindLayerLink || p.Kind == layout.KindRevisionLink {
		links = []layout.Object{linkObject(p)}
	}
	if fenced, _ := d.read(ctx, p.Digest, links); fenced {
		return storagedriver.PathNotFoundError{Path: path, DriverName: "reclaim"}
	}
	return nil
}

func isLinkOrData(k layout.Kind) bool {
	return k == layout.KindLayerLink || k == layout.KindRevisionLink || k == layout.KindBlobData
}

// GetContent reads links (pull, manifest verification, mount source) and
// small blobs (manifests).
func (d *driver) GetContent(ctx context.Context, path string) ([]byte, error) {
	p := layout.Classify(path)
	if !isLinkOrData(p.Kind) {
		return d.StorageDriver.GetContent(ctx, path)
	}
	readAfter, err := d.before(ctx, path, p)
	if err != nil {
		return nil, err
	}
	b, err := d.StorageDriver.GetContent(ctx, path)
	if err == nil && readAfter {
		if err := d.after(ctx, path, p); err != nil {
			return nil, err
		}
	}
	return b, err
}

// Stat of blob data is how Distribution checks that a blob exists.
func (d *driver) Stat(ctx context.Context, path string) (storagedriver.FileInfo, error) {
	p := layout.Classify(path)
	if !isLinkOrData(p.Kind) {
		return d.StorageDriver.Stat(ctx, path)
	}
	readAfter, err := d.before(ctx, path, p)
	if err != nil {
		return nil, err
	}
	fi, err := d.StorageDriver.Stat(ctx, path)
	if err == nil && readAfter {
		if err := d.after(ctx, path, p); err != nil {
			return nil, err
		}
	}
	return fi, err
}

// Reader serves blob content.
func (d *driver) Reader(ctx context.Context, path string, offset int64) (io.ReadCloser, error) {
	p := layout.Classify(path)
	if p.Kind != layout.KindBlobData {
		return d.StorageDriver.Reader(ctx, path, offset)
	}
	r, err := d.StorageDriver.Reader(ctx, path, offset)
	if err == nil {
		if err := d.after(ctx, path, p); err != nil {
			r.Close()
			return nil, err
		}
	}
	return r, err
}

// RedirectURL hands the client a URL to the blob; only the outermost storage
// middleware sees it, so list reclaim last when it is combined with others.
func (d *driver) RedirectURL(r *http.Request, path string) (string, error) {
	u, err := d.StorageDriver.RedirectURL(r, path)
	if p := layout.Classify(path); err == nil && u != "" && p.Kind == layout.KindBlobData {
		if err := d.after(r.Context(), path, p); err != nil {
			return "", err
		}
	}
	return u, err
}

// PutContent: a forward link write is preceded by the fence check and the
// reverse link; blob data written whole (manifests) is fence-checked.
func (d *driver) PutContent(ctx context.Context, path string, content []byte) error {
	p := layout.Classify(path)
	switch p.Kind {
	case layout.KindLayerLink, layout.KindRevisionLink:
		err := d.putLink(ctx, path, p, content)
		if s := scopeOf(ctx); s != nil {
			// A blob this request committed is now linked, or it never
			// will be by this request: queue it now rather than at the
			// request's end, before the client hears of the failure.
			if s.settle(p.Digest, err == nil) {
				d.env.enqueue(ctx, "commit", p.Digest)
			}
		}
		return err
	case layout.KindTagCurrent:
		if err := d.checkTagTarget(ctx, p.Repo, content); err != nil {
			return err
		}
		return d.StorageDriver.PutContent(ctx, path, content)
	case layout.KindBlobData:
		if _, err := d.guard(ctx, p.Digest, extra(requestOf(ctx), p.Digest)); err != nil {
			return err
		}
		if err := d.StorageDriver.PutContent(ctx, path, content); err != nil {
			return err
		}
		// a manifest blob whose revision link never comes is reviewed (queue.go)
		d.committed(ctx, p.Digest)
		return nil
	}
	return d.StorageDriver.PutContent(ctx, path, content)
}

// Move into blob data is an upload commit.
func (d *driver) Move(ctx context.Context, src, dst string) error {
	if p := layout.Classify(dst); p.Kind == layout.KindBlobData {
		if _, err := d.guard(ctx, p.Digest, extra(requestOf(ctx), p.Digest)); err != nil {
			return err
		}
		if err := d.StorageDriver.Move(ctx, src, dst); err != nil {
			return err
		}
		// an upload whose link never comes is reviewed after W (queue.go)
		d.committed(ctx, p.Digest)
		return nil
	}
	return d.StorageDriver.Move(ctx, src, dst)
}

// Delete removes reverse links after the forward links are gone, and leaves
// tombstones so stale blob-descriptor cache entries stop answering. The
// tombstones are written before the delete too: when Redis cannot take
// them, nothing is deleted (a stale cache entry would answer "exists" for
// something gone) and the caller gets a retryable error.
func (d *driver) Delete(ctx context.Context, path string) error {
	if cacheOnly(ctx) {
		if p := layout.Classify(path); p.Kind == layout.KindLayerLink || p.Kind == layout.KindRevisionLink {
			// Distribution's statter Clear after a cache entry was dropped
			// (descriptors.go): the link itself stays.
			return nil
		}
	}
	p := layout.Classify(path)
	var links []layout.Path
	switch p.Kind {
	case layout.KindLayerLink, layout.KindRevisionLink:
		links = []layout.Path{p}
	case layout.KindLayerLinkDir:
		links = []layout.Path{{Kind: layout.KindLayerLink, Repo: p.Repo, Digest: p.Digest}}
	case layout.KindRevisionLinkDir:
		links = []layout.Path{{Kind: layout.KindRevisionLink, Repo: p.Repo, Digest: p.Digest}}
	case layout.KindRepositoryDir:
		var err error
		if links, err = d.forwardLinksUnder(ctx, path); err != nil {
			return err
		}
	case layout.KindBlobData, layout.KindBlobDir:
		o := layout.Object{Blob: p.Digest}
		if err := d.env.Evict(ctx, o); err != nil {
			return fmt.Errorf("%w: delete %s: %w", ErrRetryable, path, err)
		}
		err := d.StorageDriver.Delete(ctx, path)
		if err == nil {
			d.markGone(ctx, o)
		}
		return err
	default:
		return d.StorageDriver.Delete(ctx, path)
	}
	for _, l := range links {
		if err := d.env.Evict(ctx, linkObject(l)); err != nil {
			return fmt.Errorf("%w: delete %s: %w", ErrRetryable, path, err)
		}
	}
	err := d.StorageDriver.Delete(ctx, path)
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

// forwardLinksUnder lists the layer and revision links in a directory that
// is about to be deleted whole (a repository, or its _layers/_manifests).
func (d *driver) forwardLinksUnder(ctx context.Context, dir string) ([]layout.Path, error) {
	var out []layout.Path
	err := d.StorageDriver.Walk(ctx, dir, func(fi storagedriver.FileInfo) error {
		if fi.IsDir() {
			if c := layout.Classify(fi.Path()); c.Kind == layout.KindTagDir || c.Kind == layout.KindUpload {
				return storagedriver.ErrSkipDir
			}
			return nil
		}
		if c := layout.Classify(fi.Path()); c.Kind == layout.KindLayerLink || c.Kind == layout.KindRevisionLink {
			out = append(out, c)
		}
		return nil
	})
	if err != nil && !errors.As(err, new(storagedriver.PathNotFoundError)) {
		return nil, fmt.Errorf("list links under %s before delete: %w", dir, err)
	}
	return out, nil
}

// unlink removes the reverse link of a deleted forward link. A writer may
// be re-creating the forward link meanwhile (it writes the reverse link
// first). Each side looks at the other's object after its own write, so
// whatever the order one of them puts the reverse link back:
//
//	deleter: delete forward, delete reverse, stat forward: back? restore reverse
//	writer:  put reverse,    put forward,    stat reverse: gone? put it again
//
// If the deleter's stat misses the forward link, the writer's put of it
// comes later, and so does its stat of the reverse link, which then
// sees the deleter's delete. Neither side depends on timing. The cost is a
// stale reverse link when the deleter wins the forward link: a leak that
// linkdb verify reports and rebuild removes, never a loss.
func (d *driver) unlink(ctx context.Context, p layout.Path) {
	l := linkObject(p)
	rl := layout.RepoLink{Repo: l.Repo, Kind: l.Kind}
	if ctx.Err() != nil {
		// The delete was called off (GC lost its fence or passed its
		// deadline) and the forward delete finished anyway (a driver that
		// ignores cancellation): nothing more is deleted after the call-off.
		// The reverse link stays, a leak that linkdb rebuild removes; the
		// tombstone was written before the delete.
		metricReverseLinks.WithLabelValues("delete", "kept").Inc()
		return
	}
	if err := d.links.Delete(ctx, p.Digest, rl); err != nil {
		metricReverseLinks.WithLabelValues("delete", "error").Inc()
		rlog.From(ctx).WithError(err).Warn("reclaim: stale reverse link left behind (a safe leak; linkdb verify removes it)")
		return
	}
	metricReverseLinks.WithLabelValues("delete", "ok").Inc()
	if _, err := d.StorageDriver.Stat(ctx, p.String()); !errors.As(err, new(storagedriver.PathNotFoundError)) {
		// back, or cannot tell (fail safe): the reverse link stays
		if err := d.links.Put(ctx, p.Digest, rl); err != nil {
			rlog.From(ctx).WithError(err).Error("reclaim: could not restore the reverse link of a re-created forward link")
		}
		metricReverseLinks.WithLabelValues("restore", "ok").Inc()
		return
	}
	d.markGone(ctx, l)
	// Maybe the blob's last link: the reclaimer checks when it is due (queue.go).
	d.env.enqueue(ctx, "unlink", p.Digest)
}

// putLink writes a forward link: fence check, reverse link, forward link,
// then a look at the reverse link: a concurrent delete of the same link may
// have removed it between the two writes (see unlink).
func (d *driver) putLink(ctx context.Context, path string, p layout.Path, content []byte) error {
	l := linkObject(p)
	rl := layout.RepoLink{Repo: l.Repo, Kind: l.Kind}
	if _, err := d.guard(ctx, p.Digest, []layout.Object{l}); err != nil {
		return err
	}
	if err := d.links.Put(ctx, p.Digest, rl); err != nil {
		metricReverseLinks.WithLabelValues("put", "error").Inc()
		return err // invariant: no forward link without its reverse link
	}
	metricReverseLinks.WithLabelValues("put", "ok").Inc()
	if err := d.StorageDriver.PutContent(ctx, path, content); err != nil {
		return err
	}
	if ok, err := d.links.Has(ctx, p.Digest, rl); ok && err == nil {
		return nil
	}
	// deleted under us, or cannot tell: write it again (idempotent)
	metricReverseLinks.WithLabelValues("restore", "ok").Inc()
	if err := d.links.Put(ctx, p.Digest, rl); err != nil {
		metricReverseLinks.WithLabelValues("put", "error").Inc()
		return fmt.Errorf("restore reverse link of %s: %w", path, err)
	}
	return nil
}

// checkTagTarget runs right before a tag is pointed at manifest m (the
// link's content): m's revision link in repo must still exist, checked
// after a fence-checked touch of it. A manifest PUT writes the revision link
// before the tag; a push that stalls longer than the window between the
// two could otherwise see GC delete the (still untagged) revision link and
// then write a tag that points at nothing. Now either the touch comes first
// (GC's fence is refused), or GC's delete does and the stat sees it: the
// PUT fails with a retryable error and the client's retry writes the
// revision link again.
func (d *driver) checkTagTarget(ctx context.Context, repo string, content []byte) error {
	m, err := digest.Parse(string(content))
	if err != nil || accessRecordsOff(ctx) || !layout.ValidRepo(repo) {
		return nil // not a link Distribution writes, or GC's own bookkeeping
	}
	if _, err := d.guard(ctx, m, []layout.Object{{Blob: m, Repo: repo, Kind: layout.LinkManifest}}); err != nil {
		return err
	}
	_, err = d.StorageDriver.Stat(ctx, layout.RevisionLinkPath(repo, m))
	if err == nil {
		return nil
	}
	scopeOf(ctx).refuse()
	if errors.As(err, new(storagedriver.PathNotFoundError)) {
		rlog.From(ctx).WithField("manifest", m).Info("reclaim: tag write refused, its manifest's revision link was garbage-collected meanwhile")
		return fmt.Errorf("%w: manifest %s in %s was garbage-collected before its tag was written", ErrRetryable, m, repo)
	}
	return fmt.Errorf("%w: check manifest %s in %s before its tag: %w", ErrRetryable, m, repo, err)
}

// committed queues a blob just written into the blob store for review,
// unless the same request links it: an upload commit writes its layer link
// and a manifest PUT its revision link right after the data, and a linked
// blob needs no review until a link goes (unlink queues it then). Inside a
// request the decision waits for the request's end (Handler), which saves
// a Redis round trip per pushed blob; outside one it is made now.
func (d *driver) committed(ctx context.Context, blob digest.Digest) {
	if s := scopeOf(ctx); s != nil {
		s.commit(d.env, blob)
		return
	}
	d.env.enqueue(ctx, "commit", blob)
}

func (d *driver) markGone(ctx context.Context, o layout.Object) {
	if err := d.env.Evict(ctx, o); err != nil {
		rlog.From(ctx).WithError(err).Warn("reclaim: could not record deletion for the blob descriptor cache")
	}
}

// dedup remembers, per process, which objects had their access recorded
// moments ago, so a hot blob costs at most one Redis write per interval.
type dedup struct {
	interval time.Duration
	mu       sync.Mutex
	seen     map[layout.Object]time.Time
}

const dedupMaxEntries = 1 << 16

func (d *dedup) recent(objs []layout.Object) bool {
	if d.interval <= 0 {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	for _, o := range objs {
		t, ok := d.seen[o]
		if !ok || now.Sub(t) >= d.interval {
			return false
		}
	}
	return true
}

// forget drops o, so the next access of it goes to Redis (and sees the
// tombstone just written).
func (d *dedup) forget(o layout.Object) {
	d.mu.Lock()
	delete(d.seen, o)
	d.mu.Unlock()
}

func (d *dedup) record(objs []layout.Object, at time.Time) {
	if d.interval <= 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.seen == nil || len(d.seen) >= dedupMaxEntries {
		// entries older than the interval are worthless; dropping all is
		// simpler than an LRU and costs at most one extra touch per blob
		d.seen = make(map[layout.Object]time.Time)
	}
	for _, o := range objs {
		d.seen[o] = at
	}
}
