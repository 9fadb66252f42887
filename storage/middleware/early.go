package middleware

import (
	"context"
	"errors"
	"net/http"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/internal/rlog"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/redisstate"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// Early reverse links: a request that is going to write a forward link
// (an upload commit its layer link, a manifest PUT its revision link) starts
// the fence check and the reverse link in the background as soon as it
// knows the link, so that both overlap with what Distribution does before
// the link write (syncing the upload's data, verifying the digest, moving
// it; verifying a manifest's references and writing its data). putLink then
// waits for the reverse link instead of writing it. The order the protocol
// needs is unchanged (docs/gc-protocol.md, invariant 2 and case 9):
//
//   - the reverse link is written only after a fence check of the blob and
//     the link found no fence and no tombstone (touch before act), and is
//     complete before the forward link is written; one that is there and
//     well formed already (a re-pushed manifest) is read, not written again;
//   - after the forward write, putLink looks at the reverse link again and
//     writes it back if it is gone, as for any link write (and takes that
//     back if a concurrent delete removed the forward link too,
//     reverseAfter);
//   - a request that ends without trying to write the forward link (a
//     digest mismatch, a fence met later, a failed Move) takes back the early
//     reverse link it wrote (one it found there is not its own): delete
//     it, then look at the forward link and put the reverse link back if
//     the forward link is there (another writer of the same link, which
//     wrote its own reverse link first; the same look-back as unlink). A
//     take-back that fails leaves a stale reverse link: a leak that keeps
//     the blob, which linkdb verify reports and rebuild removes, never a
//     loss. A forward write that failed keeps it: the write may have
//     landed, or land after the take-back's look.
//
// A fence, a tombstone or a Redis failure in the background check writes
// nothing: the request's own checks see the same and act as always.

// earlyKey names one reverse link of this request.
type earlyKey struct {
	blob digest.Digest
	link reclaim.RepoLink
}

// earlyLink is one background fence check and reverse-link write.
type earlyLink struct {
	checked chan struct{} // closed once the fence check is done
	done    chan struct{}
	written bool // the reverse link is there (valid once done is closed)
	created bool // ... and this request wrote it: it was not there before
	used    bool // putLink wrote (or tried to write) the forward link on it (under scope.mu)
}

// startEarly starts the background fence check and reverse-link write of
// (blob, l) for the request of ctx, once per request.
func (d *driver) startEarly(ctx context.Context, blob digest.Digest, l reclaim.RepoLink) {
	s := scopeOf(ctx)
	if s == nil || accessRecordsOff(ctx) || blob.Validate() != nil || !layout.ValidRepo(l.Repo) {
		return
	}
	k := earlyKey{blob: blob, link: l}
	s.mu.Lock()
	if _, ok := s.early[k]; ok {
		s.mu.Unlock()
		return
	}
	e := &earlyLink{checked: make(chan struct{}), done: make(chan struct{})}
	if s.early == nil {
		s.early = map[earlyKey]*earlyLink{}
	}
	s.early[k] = e
	s.mu.Unlock()
	ctx = context.WithoutCancel(ctx)
	go func() {
		defer close(e.done)
		links := []reclaim.Object{{Blob: blob, Repo: l.Repo, Kind: l.Kind}}
		d.prefetch(ctx, []redisstate.BlobTouch{{Blob: blob, Links: links}})
		close(e.checked)
		if !s.covered(append([]reclaim.Object{{Blob: blob}}, links...), d.env.opts.Dedup) {
			return // fenced, a tombstone, or Redis failing: the request's own checks decide
		}
		created, err := d.ensureReverse(ctx, blob, l)
		if err != nil {
			return // putLink writes it itself (and fails the forward write if it cannot)
		}
		e.written, e.created = true, created
	}()
}

// waitEarlyCheck waits for the background fence checks of blob this
// request started, so that a check of the same objects finds them done
// (scope.covered) instead of asking Redis a second time.
func (s *scope) waitEarlyCheck(blob digest.Digest) {
	if s == nil {
		return
	}
	s.mu.Lock()
	var wait []chan struct{}
	for k, e := range s.early {
		if k.blob == blob {
			wait = append(wait, e.checked)
		}
	}
	s.mu.Unlock()
	for _, c := range wait {
		<-c
	}
}

// useEarly waits for an early reverse link of (blob, l) and reports whether
// it was written.
func (s *scope) useEarly(blob digest.Digest, l reclaim.RepoLink) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	e := s.early[earlyKey{blob: blob, link: l}]
	s.mu.Unlock()
	if e == nil {
		return false
	}
	<-e.done
	return e.written
}

// usedEarly marks the early reverse link of (blob, l), if any, as the one
// of a forward link this request wrote, or tried to write (a failed write
// may land all the same): the request's end leaves it alone.
func (s *scope) usedEarly(blob digest.Digest, l reclaim.RepoLink) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.early[earlyKey{blob: blob, link: l}]; e != nil {
		e.used = true
	}
}

// takeBackEarly runs when the request ends: every early reverse link whose
// forward link this request did not write is taken back.
func (s *scope) takeBackEarly(ctx context.Context) {
	s.mu.Lock()
	early := s.early
	s.early = nil
	s.mu.Unlock()
	for k, e := range early {
		<-e.done
		s.mu.Lock()
		// A reverse link that was there before the request (the
		// forward link exists, or another request is writing it) is
		// not this request's to take back.
		keep := !e.created || e.used
		s.mu.Unlock()
		if keep {
			continue
		}
		s.env.takeBack(context.WithoutCancel(ctx), k)
	}
}

// takeBack deletes the reverse link of k, then puts it back if the forward
// link is there after all (another request wrote it meanwhile). Taken
// back, it may have been the blob's last reverse link: the blob is queued
// for review, as unlink does (the delete that removed the forward link
// queued it too, but its review may come before the take-back).
func (e *Env) takeBack(ctx context.Context, k earlyKey) {
	if err := e.Links.Delete(ctx, k.blob, k.link); err != nil {
		rlog.From(ctx).WithError(err).Warn("reclaim: stale reverse link left behind (a safe leak; linkdb verify removes it)")
		return
	}
	metricReverseLinks.WithLabelValues("takeback", "ok").Inc()
	fwd := layout.LayerLinkPath(k.link.Repo, k.blob)
	if k.link.Kind == reclaim.LinkManifest {
		fwd = layout.RevisionLinkPath(k.link.Repo, k.blob)
	}
	if _, err := e.Raw.Stat(ctx, fwd); errors.As(err, new(storagedriver.PathNotFoundError)) {
		e.enqueue(ctx, "takeback", k.blob)
		return
	}
	metricReverseLinks.WithLabelValues("restore", "ok").Inc()
	// there, or cannot tell (fail safe): the reverse link stays
	if err := e.Links.Put(ctx, k.blob, k.link); err != nil {
		rlog.From(ctx).WithError(err).Error("reclaim: could not restore the reverse link of a forward link written meanwhile")
	}
}

// commitEarly starts the early reverse link of an upload commit
// (PUT /v2/<repo>/blobs/uploads/<id>?digest=<d>) at its first driver call:
// the layer link repo -> d.
func (d *driver) commitEarly(ctx context.Context) {
	info := requestOf(ctx)
	if info.intent != intentCommit || !layout.ValidRepo(info.repo) {
		return
	}
	r, _ := ctx.Value("http.request").(*http.Request)
	if r == nil || r.Method != http.MethodPut {
		return
	}
	dg, err := digest.Parse(r.URL.Query().Get("digest"))
	if err != nil || dg.Algorithm() != digest.SHA256 {
		return
	}
	d.startEarly(ctx, dg, reclaim.RepoLink{Repo: info.repo, Kind: reclaim.LinkLayer})
}

// Writer is where an upload commit's request first reaches the storage
// (Distribution resumes the upload): its early reverse link starts here.
func (d *driver) Writer(ctx context.Context, path string, append bool) (storagedriver.FileWriter, error) {
	if append {
		d.commitEarly(ctx)
	}
	return d.StorageDriver.Writer(ctx, path, append)
}
