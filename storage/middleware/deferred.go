package middleware

import (
	"context"
	"errors"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// Deferred looks. The writer's look at its reverse link after a forward
// link write (case 9, reverseAfter, and dataAfter when the protection may
// have lapsed) must come after the forward write, before the request's
// answer, and before any later write of the request that depends on the
// link: a manifest PUT's tag, which must keep its old value when the look
// withdraws the revision link. Nothing in the argument needs it to come
// right after the write. So inside a request it runs in the background
// from the moment the forward write returned, beside what Distribution
// does next (an upload commit removes its upload directory, a manifest PUT
// by tag writes the tag's index link), and it is joined:
//
//   - before a tag's current link is written (PutContent), which fails
//     with the look's error;
//   - before the status is sent (refusalWriter.WriteHeader): a look that
//     failed turns whatever Distribution answers, a 201 included, into a
//     503, as a failed link write would have;
//   - when the request ends (Handler), before its scope is done.
//
// Outside a request (GC's tools, tests on the bare driver) the look runs
// inline, as part of the write.
//
// The tag check's Stat of the revision link (case 4, checkTagTarget) moves
// off the chain the same way: Distribution writes the tag's index link
// right before its current link, so the Stat starts there, in the
// background, and the current link write uses its answer when it comes
// within half a window (less the dedup interval) of the request's own
// check of that revision link; otherwise, or when the early Stat found
// anything but the link, or a look saw the link deleted under it, the
// check runs before the write as always.

// look is one deferred look of this request.
type look struct {
	done    chan struct{}
	err     error // valid once done is closed
	deleted bool  // a delete removed the forward link after the write (reverseAfter)
}

// later runs f, the look after a forward write, in the background until
// the request joins it (joinLooks).
func (s *scope) later(f func() (deleted bool, err error)) {
	l := &look{done: make(chan struct{})}
	s.mu.Lock()
	s.looks = append(s.looks, l)
	s.mu.Unlock()
	go func() {
		defer close(l.done)
		l.deleted, l.err = f()
	}()
}

// joinLooks waits for every look this request started (and its early tag
// check) and returns their errors; deleted reports whether one of them
// found its forward link deleted after the write.
func (s *scope) joinLooks() (deleted bool, err error) {
	if s == nil {
		return false, nil
	}
	s.mu.Lock()
	looks, c := s.looks, s.tagCheck
	s.mu.Unlock()
	if c != nil {
		<-c.done
	}
	var errs []error
	for _, l := range looks {
		<-l.done
		deleted = deleted || l.deleted
		errs = append(errs, l.err)
	}
	return deleted, errors.Join(errs...)
}

// tagCheck is the early Stat of the revision link a tag is about to name.
type tagCheck struct {
	repo    string
	m       digest.Digest
	checked time.Time // when the request's own check still covered the link
	done    chan struct{}
	err     error // the Stat's, valid once done is closed
}

// startTagCheck starts the Stat of m's revision link in repo in the
// background when Distribution writes a tag's index link to m, provided
// this request's own fence check of m and its revision link still covers
// them (no round trip to Redis: the Stat alone).
func (d *driver) startTagCheck(ctx context.Context, repo string, m digest.Digest) {
	s := scopeOf(ctx)
	if s == nil || accessRecordsOff(ctx) || !layout.ValidRepo(repo) || m.Validate() != nil {
		return
	}
	objs := []reclaim.Object{{Blob: m}, {Blob: m, Repo: repo, Kind: reclaim.LinkManifest}}
	if !s.covered(objs, d.env.opts.Dedup) {
		return
	}
	c := &tagCheck{repo: repo, m: m, checked: d.env.now(), done: make(chan struct{})}
	s.mu.Lock()
	s.tagCheck = c
	s.mu.Unlock()
	go func() {
		defer close(c.done)
		_, c.err = d.StorageDriver.Stat(ctx, layout.RevisionLinkPath(repo, m))
	}()
}

// tagTarget is the check before a tag in repo is pointed at content:
// the early Stat when it found the revision link and its check is still
// fresh (see above), else checkTagTarget now. checked is the time the
// check's protection runs from (tagWritten).
func (d *driver) tagTarget(ctx context.Context, repo string, content []byte, lookDeleted bool) (checked time.Time, err error) {
	s := scopeOf(ctx)
	var c *tagCheck
	if s != nil {
		s.mu.Lock()
		c, s.tagCheck = s.tagCheck, nil
		s.mu.Unlock()
	}
	if c != nil && !lookDeleted && c.repo == repo && string(content) == c.m.String() {
		<-c.done
		if c.err == nil && d.env.now().Sub(c.checked) < d.env.fresh() {
			return c.checked, nil
		}
	}
	checked = d.env.now()
	return checked, d.checkTagTarget(ctx, repo, content)
}
