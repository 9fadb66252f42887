package collector

import (
	"context"
	"errors"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/gc"
	"github.com/reclaim-registry/reclaim/reclaim"
)

// Orphans is the deletion step of blobs that lost their last link, under
// preconditions checked once (Collector.Orphans): the step a collection
// gives a blob whose last link it removed, for gc/reclaimer.
type Orphans struct {
	dl *deleter
}

// Orphans checks the preconditions of deleting blobs nothing links: a
// collection's (an *AbortError when one fails), and the link database
// known to be complete (an *AbortError for linkdb_incomplete otherwise),
// since an empty reverse-link list proves nothing until it is. The step it
// returns has no repository: every reverse link is another repository's.
func (c *Collector) Orphans(ctx context.Context) (*Orphans, error) {
	tr, err := c.preconditions(c.runContext(ctx))
	if err != nil {
		return nil, err
	}
	if !tr.linkdbOK {
		return nil, abort(reclaim.AbortLinkDBIncomplete, errors.New(tr.linkdbNote))
	}
	return &Orphans{dl: &deleter{c: c, pol: policy{Policy: gc.Policy{Window: c.cfg.Window, Now: tr.now, LinkDBComplete: true}}, by: "reclaimer"}}, nil
}

// Now is the tracker's time when the preconditions were checked.
func (o *Orphans) Now() time.Time { return o.dl.pol.Now }

// Delete decides blob and, when nothing links it and nobody accessed it
// within the window, deletes it behind its fence after a re-check. errs
// are the failures beside the decision (a fence not released, say).
func (o *Orphans) Delete(ctx context.Context, blob digest.Digest) (dec gc.Decision, errs []gc.Decision) {
	scratch := &Report{}
	dec = o.dl.deleteBlob(o.dl.c.runContext(ctx), blob, scratch)
	return dec, scratch.Errors
}

// Purge deletes blob's data for good, as Delete does with the trash off:
// the trash's purge calls it once it removed the blob's expired holds, and
// it deletes only when no link and no other hold keeps the blob.
func (o *Orphans) Purge(ctx context.Context, blob digest.Digest) (dec gc.Decision, errs []gc.Decision) {
	scratch := &Report{}
	dl := *o.dl
	dl.purge = true
	dec = dl.deleteBlob(dl.c.runContext(ctx), blob, scratch)
	return dec, scratch.Errors
}
