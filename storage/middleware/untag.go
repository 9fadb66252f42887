package middleware

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	v2 "github.com/distribution/distribution/v3/registry/api/v2"
	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/internal/pause"
	"github.com/reclaim-registry/reclaim/internal/rlog"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// untagLease bounds how long a manifest DELETE that died holds a tag's
// fence (as retention's apply does: pushes moving the tag answer 503
// until it expires).
const untagLease = time.Minute

// untagged reports the manifest whose DELETE (by digest) is removing the
// tag directory of p: Distribution's handler looks up every tag naming
// that manifest, then deletes each tag's directory. ok is false for any
// other delete of a tag (a DELETE by tag, GC's own work).
func untagged(ctx context.Context, p layout.Path) (m digest.Digest, ok bool) {
	if p.Kind != layout.PathTagDir || p.Tag == "" || accessRecordsOff(ctx) {
		return "", false
	}
	info := requestOf(ctx)
	r, _ := ctx.Value("http.request").(*http.Request)
	if info.route != v2.RouteNameManifest || r == nil || r.Method != http.MethodDelete || info.repo != p.Repo {
		return "", false
	}
	ref, _ := ctx.Value("vars.reference").(string)
	if !strings.Contains(ref, ":") {
		return "", false // by tag: the client names the tag it deletes
	}
	d, err := digest.Parse(ref)
	return d, err == nil
}

// untag is the tag delete of a manifest DELETE made a compare-and-delete:
// Distribution found tag p naming manifest m, and a push may have moved the
// tag to another manifest since (201). Deleting the directory then would
// lose that tag. So, as retention's apply does (docs/gc-protocol.md, case
// 13): the tag's fence, the tag read again, the directory deleted only
// while it still names m, the fence given back. A push that moved the tag
// asks for the fence after its write (tagWritten): if it found none, this
// read sees its write and keeps the tag; if it found it, it waits for the
// release and answers 201 only if its write is still there. A tag that
// moved is left, and the DELETE answers 202 for what it deleted.
func (d *driver) untag(ctx context.Context, path string, p layout.Path, m digest.Digest) error {
	// another deleter's fence (a retention apply, a restore) is waited
	// out as a write waits for one, up to fencewait
	deadline := time.Now().Add(d.env.opts.FenceWait)
	f, err := d.env.Tracker.FenceTag(ctx, p.Repo, p.Tag, untagLease)
	for errors.Is(err, reclaim.ErrFenced) && time.Now().Before(deadline) {
		if err := pause.For(ctx, d.env.opts.FencePoll); err != nil {
			return err
		}
		f, err = d.env.Tracker.FenceTag(ctx, p.Repo, p.Tag, untagLease)
	}
	if err != nil {
		// held past fencewait, or Redis cannot say: 503, the client
		// retries the DELETE
		return refuse(ctx, m, fmt.Errorf("delete tag %s of %s: %w", p.Tag, p.Repo, err))
	}
	defer func() {
		if err := d.env.Tracker.Release(context.WithoutCancel(ctx), f); err != nil {
			rlog.From(ctx).WithError(err).Warn("reclaim: could not release a tag's fence; pushes moving it wait for its lease")
		}
	}()
	b, err := d.StorageDriver.GetContent(ctx, layout.TagCurrentPath(p.Repo, p.Tag))
	switch {
	case layout.IsNotFound(err):
		// no current link: nothing a client was told 201 for (a push
		// writing it now finds the fence and looks after the release)
	case err != nil:
		scopeOf(ctx).refuse(refusedStorage)
		return fmt.Errorf("%w: read tag %s of %s before deleting it: %w", ErrRetryable, p.Tag, p.Repo, err)
	case strings.TrimSpace(string(b)) != m.String():
		rlog.From(ctx).WithField("tag", p.Tag).Info("reclaim: tag kept: it was moved to another manifest while the manifest it named was deleted")
		return nil
	}
	// a fence that lapsed (a slow store, a paused process) may have let
	// a push through: no delete then
	if err := d.env.Tracker.Confirm(ctx, f, untagLease); err != nil {
		if errors.Is(err, reclaim.ErrFenceLost) {
			err = fmt.Errorf("%w: %w", reclaim.ErrFenced, err) // refused as fenced, not as Redis down
		}
		return refuse(ctx, m, fmt.Errorf("delete tag %s of %s: %w", p.Tag, p.Repo, err))
	}
	return d.StorageDriver.Delete(ctx, path)
}
