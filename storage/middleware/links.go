package middleware

import (
	"context"
	"errors"
	"fmt"
	"time"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/internal/pause"
	"github.com/reclaim-registry/reclaim/internal/rlog"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/redisstate"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/linkdb"
)

// linkObject is the tracker object of a forward (or reverse) link path.
func linkObject(p layout.Path) reclaim.Object {
	return reclaim.Object{Blob: p.Digest, Repo: p.Repo, Kind: p.LinkSet()}
}

// putLink writes a forward link: fence check, reverse link (unless this
// request wrote it early, early.go; written only when it is not there
// already, ensureReverse), a look at the data the link names (dataBehind),
// forward link, then a look at the reverse link (lookAfter): a concurrent
// delete of the same link may have removed it between the two writes (see
// unlink), and may have removed the forward link too, in which case the
// reverse link is taken back (reverseAfter). Inside a request the look runs
// in the background until the request joins it (deferred.go).
func (d *driver) putLink(ctx context.Context, path string, p layout.Path, content []byte) error {
	l := linkObject(p)
	rl := reclaim.RepoLink{Repo: l.Repo, Kind: l.Kind}
	checked := d.env.now()
	gone, err := d.guard(ctx, p.Digest, []reclaim.Object{l})
	if err != nil {
		return err
	}
	if p.Kind == layout.PathRevisionLink {
		if err := d.refsBeforeRevision(ctx, p); err != nil {
			return err
		}
	}
	s := scopeOf(ctx)
	early := s.useEarly(p.Digest, rl) // written in the background already (early.go)
	created := false
	if !early {
		if created, err = d.ensureReverse(ctx, p.Digest, rl); err != nil {
			return err // invariant: no forward link without its reverse link
		}
	}
	if err := d.dataBehind(ctx, checked, len(gone) > 0, p.Digest, []reclaim.Object{l}, layout.BlobDataPath(p.Digest)); err != nil {
		if created {
			d.env.takeBack(context.WithoutCancel(ctx), earlyKey{blob: p.Digest, link: rl})
		}
		return err // an early reverse link is taken back when the request ends
	}
	// From here the forward link may exist: a write that fails may have
	// landed, or land later (an S3 PUT whose answer was lost, or whose
	// request was cancelled once sent), after any look a take-back makes.
	// So its reverse link stays (a leak at worst, never a loss).
	s.usedEarly(p.Digest, rl)
	if err := d.StorageDriver.PutContent(ctx, path, content); err != nil {
		return err
	}
	look := func() (bool, error) {
		deleted, err := d.lookAfter(ctx, path, p, checked)
		d.linked(ctx, p.Digest, err)
		return deleted, err
	}
	if s == nil {
		_, err := look()
		return err
	}
	s.later(look)
	return nil
}

// lookAfter is the writer's look once its forward link at path landed:
// its reverse link (reverseAfter), then, when the link's protection may
// have lapsed, the data it names (dataAfter).
func (d *driver) lookAfter(ctx context.Context, path string, p layout.Path, checked time.Time) (deleted bool, err error) {
	l := linkObject(p)
	restored, deleted, err := d.reverseAfter(ctx, path, p.Digest, reclaim.RepoLink{Repo: l.Repo, Kind: l.Kind})
	if err != nil || deleted {
		return deleted, err
	}
	if !restored && d.env.now().Sub(checked) < d.env.fresh() {
		return false, nil
	}
	return false, d.dataAfter(ctx, path, p, l)
}

// linked ends the wait for a link to blob, which this request may have
// committed: a link written (err nil) needs no review, one that failed
// leaves the blob to be queued now rather than when the request ends,
// before the client hears of the failure.
func (d *driver) linked(ctx context.Context, blob digest.Digest, err error) {
	if s := scopeOf(ctx); s != nil && s.settle(blob, err == nil) {
		d.env.enqueue(ctx, "commit", blob)
	}
}

// reverseAfter is the writer's look of case 9, right after its forward
// link at path was written: the reverse link is there, or it is written
// again (restored). A reverse link found gone was removed by a concurrent
// delete of the same link, and that delete may have removed the forward
// link this request just wrote first (the deleter won it: its look found no
// forward link and left none). Then the reverse link written again keeps
// the blob for a forward link that is gone: a stale reverse link. So the
// forward link is looked at once more; gone, the reverse link is taken back
// the way a deleter unlinks (takeBack: delete it, then look at the forward
// link and put it back if a writer re-created it meanwhile). deleted
// reports that: the write landed and a delete came after it, so the
// request goes on as written. A reverse link that could not be read, or a
// forward link that cannot be seen either way, keeps its reverse link
// (fail safe: a leak, never a loss).
//
// The reverse link taken back is the one this request found gone and
// wrote. Another writer of the same link may have written it too in
// between (its Ensure); that writer writes its forward link and then looks
// at the reverse link, as this one did: if the take-back's look misses that
// forward link, the writer's look comes later and sees the delete.
func (d *driver) reverseAfter(ctx context.Context, path string, blob digest.Digest, rl reclaim.RepoLink) (restored, deleted bool, err error) {
	ok, hasErr := d.links.Has(ctx, blob, rl)
	if ok && hasErr == nil {
		return false, false, nil
	}
	// deleted under us, or cannot tell: write it again (idempotent)
	metricReverseLinks.WithLabelValues("restore", "ok").Inc()
	if err := d.links.Put(ctx, blob, rl); err != nil {
		metricReverseLinks.WithLabelValues("put", "error").Inc()
		return false, false, fmt.Errorf("restore reverse link of %s: %w", path, err)
	}
	if hasErr != nil {
		return true, false, nil // not known to be gone: not known to be this request's, it stays
	}
	ctx = context.WithoutCancel(ctx) // a cancelled look would leave it stale
	if _, err := d.StorageDriver.Stat(ctx, path); !errors.As(err, new(storagedriver.PathNotFoundError)) {
		return true, false, nil // there, or cannot tell: the reverse link stays
	}
	d.env.takeBack(ctx, earlyKey{blob: blob, link: rl})
	return false, true, nil
}

// dataAfter runs after a forward link was written when its protection may
// have lapsed: its reverse link was missing for a while (a concurrent
// delete of the same link, or a take-back, removed it and this request put
// it back), or the write landed more than half a window after the check.
// In both cases a GC fence may have found no reverse link and deleted the
// data. So, with the reverse link now in place, touch again (dataBehind):
// clean, nothing was deleted and nothing can be; a tombstone makes the
// storage decide, and data that is gone withdraws the dangling forward
// link (the client is answered 503 and pushes again) instead of a 201
// for an image that 404s.
func (d *driver) dataAfter(ctx context.Context, path string, p layout.Path, l reclaim.Object) error {
	err := d.dataBehind(ctx, time.Time{}, false, p.Digest, []reclaim.Object{l}, layout.BlobDataPath(p.Digest))
	if errors.Is(err, errCollected) {
		if derr := d.Delete(context.WithoutCancel(ctx), path); derr != nil && !errors.As(derr, new(storagedriver.PathNotFoundError)) {
			rlog.From(ctx).WithError(derr).Error("reclaim: a link to collected data could not be withdrawn (linkdb verify lists it as broken_forward)")
		}
	}
	return err
}

// dataBehind runs once the reverse link of a link to blob is in place and
// before the forward link is written: it fails the write unless the
// object at dependsOn (the blob's data, or for a tag the manifest's
// revision link) still exists. Distribution looked for it earlier (the
// Stat of an upload commit, a mount or a manifest PUT; the check before a
// tag write) and the request may have stalled since, for longer than the
// window, while the reclaimer or a collect deleted it (docs/gc-protocol.md,
// case 12).
//
// The check that ran at checked recorded an access: no fence on blob (or
// links) can be granted for a window after it. If less than half a window
// has passed (less the dedup interval, the age a reused check may have) and
// it found no tombstone, nothing was deleted since and the reverse link now
// keeps the blob: nothing to do. Otherwise it touches again, now that the
// reverse link is there: either that touch comes before any fence (a
// collector's re-read under its fence then sees the reverse link), or the
// fence came first and the touch waits it out; a delete that happened
// leaves its tombstone (written before the delete), and a tombstone makes
// the storage decide: gone fails the write with a retryable 503.
func (d *driver) dataBehind(ctx context.Context, checked time.Time, gone bool, blob digest.Digest, links []reclaim.Object, dependsOn string) error {
	if accessRecordsOff(ctx) {
		return nil
	}
	if d.env.now().Sub(checked) >= d.env.fresh() {
		g, err := d.guard(ctx, blob, links)
		if err != nil {
			return err
		}
		gone = len(g) > 0
	}
	if !gone {
		return nil
	}
	return d.stillThere(ctx, dependsOn, blob)
}

// ensureReverse makes sure the reverse link (blob, l) is there before its
// forward link is written. A link that is there and well formed is not
// written again (a re-pushed manifest writes its revision link again, a
// re-uploaded layer its layer link): the case-9 look after the forward
// write needs only that the reverse link was there before it, not that
// this request wrote it. created reports whether it was written now.
func (d *driver) ensureReverse(ctx context.Context, blob digest.Digest, l reclaim.RepoLink) (created bool, err error) {
	found, err := d.links.Ensure(ctx, blob, l)
	switch {
	case err != nil:
		metricReverseLinks.WithLabelValues("put", "error").Inc()
		return false, err
	case found == linkdb.LinkPresent:
		metricReverseLinks.WithLabelValues("put", "present").Inc()
		return false, nil
	}
	metricReverseLinks.WithLabelValues("put", "ok").Inc()
	return true, nil
}

// linksDeletedWith lists the forward links a delete of path removes: the
// link itself, the link in a link directory, or every link of a repository
// (or of its _layers or _manifests).
func (d *driver) linksDeletedWith(ctx context.Context, path string, p layout.Path) ([]layout.Path, error) {
	switch p.Kind {
	case layout.PathLayerLink, layout.PathRevisionLink:
		return []layout.Path{p}, nil
	case layout.PathLayerLinkDir:
		return []layout.Path{{Kind: layout.PathLayerLink, Repo: p.Repo, Digest: p.Digest}}, nil
	case layout.PathRevisionLinkDir:
		return []layout.Path{{Kind: layout.PathRevisionLink, Repo: p.Repo, Digest: p.Digest}}, nil
	case layout.PathRepositoryDir:
		return d.forwardLinksUnder(ctx, path)
	}
	return nil, nil
}

// forwardLinksUnder lists the layer and revision links in a directory that
// is about to be deleted whole.
func (d *driver) forwardLinksUnder(ctx context.Context, dir string) ([]layout.Path, error) {
	var out []layout.Path
	err := d.StorageDriver.Walk(ctx, dir, func(fi storagedriver.FileInfo) error {
		c := layout.Classify(fi.Path())
		switch {
		case fi.IsDir() && (c.Kind == layout.PathTagDir || c.Kind == layout.PathUpload):
			return storagedriver.ErrSkipDir
		case !fi.IsDir() && isLink(c.Kind):
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
// sees the deleter's delete. Neither side depends on timing. When the
// deleter wins the forward link (it deletes the writer's forward link
// before its reverse link), the writer's repair writes a reverse link for
// a forward link that is gone; the writer then looks at the forward link
// once more and takes its repair back (reverseAfter).
func (d *driver) unlink(ctx context.Context, p layout.Path) {
	l := linkObject(p)
	rl := reclaim.RepoLink{Repo: l.Repo, Kind: l.Kind}
	if ctx.Err() != nil {
		if accessRecordsOff(ctx) {
			// GC's delete was called off (it lost its fence or passed its
			// deadline) and the forward delete finished anyway (a driver
			// that ignores cancellation): nothing more is deleted after the
			// call-off. The reverse link stays, a leak that linkdb rebuild
			// removes; the tombstone was written before the delete.
			metricReverseLinks.WithLabelValues("delete", "kept").Inc()
			return
		}
		// A client's request, whose client went away once its forward
		// delete was done: the request's own bookkeeping goes on, as it
		// would have (else the blob keeps a stale reverse link that no
		// GC removes, only a rebuild).
		ctx = context.WithoutCancel(ctx)
	}
	if err := d.links.Delete(ctx, p.Digest, rl); err != nil {
		metricReverseLinks.WithLabelValues("delete", "error").Inc()
		rlog.From(ctx).WithError(err).Warn("reclaim: stale reverse link left behind (a safe leak; linkdb verify removes it)")
		return
	}
	metricReverseLinks.WithLabelValues("delete", "ok").Inc()
	// The reverse link is gone: finish even if the caller gives up now (a
	// client hanging up on S3 cancels every later call). A cancelled stat
	// "cannot tell" and would leave a stale reverse link; a cancelled
	// restore would leave a blob nobody links and nobody queued.
	ctx = context.WithoutCancel(ctx)
	if _, err := d.StorageDriver.Stat(ctx, p.String()); !errors.As(err, new(storagedriver.PathNotFoundError)) {
		// back, or cannot tell (fail safe): the reverse link stays
		if err := d.links.Put(ctx, p.Digest, rl); err != nil {
			rlog.From(ctx).WithError(err).Error("reclaim: could not restore the reverse link of a re-created forward link")
		}
		metricReverseLinks.WithLabelValues("restore", "ok").Inc()
		return
	}
	d.markGone(ctx, l)
	// Maybe the blob's last link: the reclaimer checks when it is due.
	d.env.enqueue(ctx, "unlink", p.Digest)
}

// checkTagTarget runs right before a tag is pointed at manifest m (the
// link's content): m's revision link in repo must still exist, checked
// after a fence-checked touch of it. A manifest PUT writes the revision link
// before the tag; a push that stalls longer than the window between the
// two could otherwise see GC delete the (still untagged) revision link and
// then write a tag that points at nothing. Either the touch comes first
// (GC's fence is refused), or GC's delete does and the stat sees it: the
// PUT fails with a retryable error and the client's retry writes the
// revision link again.
func (d *driver) checkTagTarget(ctx context.Context, repo string, content []byte) error {
	m, err := digest.Parse(string(content))
	if err != nil || accessRecordsOff(ctx) || !layout.ValidRepo(repo) {
		return nil // not a link Distribution writes, or GC's own bookkeeping
	}
	// A tombstone needs no answer: the Stat below asks the storage anyway.
	if _, err := d.guard(ctx, m, []reclaim.Object{{Blob: m, Repo: repo, Kind: reclaim.LinkManifest}}); err != nil {
		return err
	}
	_, err = d.StorageDriver.Stat(ctx, layout.RevisionLinkPath(repo, m))
	if err == nil {
		return nil
	}
	scopeOf(ctx).refuse(refusedStorage)
	if errors.As(err, new(storagedriver.PathNotFoundError)) {
		scopeOf(ctx).refuse(refusedCollected)
		rlog.From(ctx).WithField("manifest", m).Info("reclaim: tag write refused, its manifest's revision link was garbage-collected meanwhile")
		return fmt.Errorf("%w: manifest %s in %s was garbage-collected before its tag was written", ErrRetryable, m, repo)
	}
	return fmt.Errorf("%w: check manifest %s in %s before its tag: %w", ErrRetryable, m, repo, err)
}

// tagWritten runs right after a tag's current link was written, pointing
// at manifest m (content). The tag write was checked before (its target's
// revision link exists, checkTagTarget); if the write came more than half
// a window after that check, the target is looked at again (dataBehind). Then
// the write is checked against a tag delete in flight (retention's
// compare-and-delete, redisstate/tagfence.go): write first, ask second. A
// fence means the delete may have removed this very write: wait for the
// release, and unless the tag still points at m, fail with a retryable
// 503, so the client pushes again rather than hear 201 for a tag that is
// gone. The fence's mark, or a request that took half TagMarkTTL since
// its check, makes it look at the tag the same way.
func (d *driver) tagWritten(ctx context.Context, path string, p layout.Path, content []byte, checked time.Time) error {
	m, err := digest.Parse(string(content))
	if err != nil || accessRecordsOff(ctx) || !layout.ValidRepo(p.Repo) || p.Tag == "" {
		return nil // not a link Distribution writes, or GC's own bookkeeping
	}
	rev := []reclaim.Object{{Blob: m, Repo: p.Repo, Kind: reclaim.LinkManifest}}
	if err := d.dataBehind(ctx, checked, false, m, rev, layout.RevisionLinkPath(p.Repo, m)); err != nil {
		return err
	}
	deadline := time.Now().Add(d.env.opts.FenceWait)
	lookAgain := false
	for {
		fenced, lately, err := d.env.Tracker.TagState(ctx, p.Repo, p.Tag)
		if err != nil {
			return refuse(ctx, m, err)
		}
		// a deleter that fenced, deleted and released since this write
		// leaves only its mark: look at the tag as after a wait
		lookAgain = lookAgain || lately
		if !fenced {
			break
		}
		if !time.Now().Before(deadline) {
			return refuse(ctx, m, fmt.Errorf("%w: tag %s of %s is being deleted", reclaim.ErrFenced, p.Tag, p.Repo))
		}
		lookAgain = true
		if err := pause.For(ctx, d.env.opts.FencePoll); err != nil {
			return err
		}
	}
	// a mark lasts TagMarkTTL past a release: a request that stalled
	// about that long since its write may have outlived the mark of a
	// deleter that ran meanwhile, so it looks at the tag whatever it found
	lookAgain = lookAgain || d.env.now().Sub(checked) >= redisstate.TagMarkTTL/2
	if !lookAgain {
		return nil
	}
	b, err := d.StorageDriver.GetContent(ctx, path)
	if err == nil && string(b) == string(content) {
		return nil
	}
	scopeOf(ctx).refuse(refusedTagDelete)
	rlog.From(ctx).WithField("tag", p.Tag).Info("reclaim: tag write refused, a retention delete or a trash restore of the tag ran while it was written")
	if layout.IsNotFound(err) {
		d.clearTagLeftovers(ctx, p.Repo, p.Tag)
	}
	return fmt.Errorf("%w: tag %s of %s was deleted or restored by GC while it was written", ErrRetryable, p.Tag, p.Repo)
}

// tagLeftoversLease bounds the fence clearTagLeftovers holds: a Stat, a
// confirmation and one delete.
const tagLeftoversLease = 30 * time.Second

// clearTagLeftovers removes the directory of a tag that has no current
// link, after a write of the tag was refused. Distribution writes a tag's
// index entry before its current link, so a refused write leaves
// tags/<tag>/index/... behind when the tag's current link is gone: a
// delete that ran while it was written took the current link but not an
// entry written after its listing (an object store deletes a directory as
// a listing and then the keys listed), or the write was refused before its
// current link. Distribution's tag list shows such a directory as a tag
// whose GET answers 404, until something writes or deletes the tag.
//
// It deletes as every tag deleter does (redisstate/tagfence.go): under
// the tag's fence, and only when the current link is still absent under
// it. A push that writes the tag meanwhile asks after its write, finds the
// fence or its mark, and looks at its tag again: 503 if this removed it.
// Best effort: a fence held by another deleter, or Redis unreachable,
// leaves the directory as Distribution would.
func (d *driver) clearTagLeftovers(ctx context.Context, repo, tag string) {
	ctx = context.WithoutCancel(ctx) // the client may be gone; the leftover is not
	current := layout.TagCurrentPath(repo, tag)
	if _, err := d.StorageDriver.Stat(ctx, current); !layout.IsNotFound(err) {
		// tagged again meanwhile, or unreadable: leave it, and spare
		// the tag a fence whose mark makes its pushes read it again
		return
	}
	log := rlog.From(ctx).WithField("tag", tag)
	f, err := d.env.Tracker.FenceTag(ctx, repo, tag, tagLeftoversLease)
	if err != nil {
		log.WithError(err).Info("reclaim: left the directory of a tag without a current link (could not fence the tag)")
		return
	}
	defer func() { _ = d.env.Tracker.Release(ctx, f) }()
	if _, err := d.StorageDriver.Stat(ctx, current); !layout.IsNotFound(err) {
		return
	}
	if err := d.env.Tracker.Confirm(ctx, f, tagLeftoversLease); err != nil {
		log.WithError(err).Info("reclaim: left the directory of a tag without a current link (fence lost)")
		return
	}
	if err := d.StorageDriver.Delete(ctx, layout.TagsDir(repo)+"/"+tag); err != nil && !layout.IsNotFound(err) {
		log.WithError(err).Warn("reclaim: could not remove the directory of a tag without a current link")
		return
	}
	metricTagLeftovers.Inc()
	log.Info("reclaim: removed the directory a refused tag write left without a current link")
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

func (d *driver) markGone(ctx context.Context, o reclaim.Object) {
	if err := d.env.Evict(ctx, o); err != nil {
		rlog.From(ctx).WithError(err).Warn("reclaim: could not record deletion for the blob descriptor cache")
	}
}
