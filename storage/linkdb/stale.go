package linkdb

import (
	"context"
	"time"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// stale is an entry (reverse link or referrers entry) whose forward link
// was missing when the walk looked.
type stale struct {
	kind    Kind
	link    reclaim.Object // the link whose fence guards the removal
	forward string         // the link whose absence makes victim stale
	victim  string
	modTime time.Time
	remove  func(context.Context) error // default: delete victim
}

// removeStale removes s.victim if its forward link is still absent. The
// middleware writes the reverse link before the forward link, so removing a
// reverse link races a push that re-links the blob: the push may write the
// reverse link after our re-check and before our delete, then the forward
// link, leaving a forward link without reverse link. The fence closes that:
// while rebuild holds the link's fence, the middleware refuses the write, and
// the fence is refused if the link was touched within the protection window.
// Without a fence only an offline rebuild removes anything.
func (r *rebuild) removeStale(ctx context.Context, s stale) {
	r.f.add(Problem{Kind: s.kind, Path: s.victim, Repo: s.link.Repo, Digest: s.link.Blob})
	if r.opts.MinAge > 0 && r.opts.now().Sub(s.modTime) < r.opts.MinAge {
		r.kept.Add(1) // likely a push between its reverse and forward write
		return
	}
	if r.opts.DryRun {
		r.removed.Add(1)
		return
	}
	release, ok := r.fence(ctx, s.link)
	if !ok {
		r.kept.Add(1) // recently accessed, fenced by GC, Redis down, or no fence
		return
	}
	defer release()
	var content []byte
	if r.opts.Fencer == nil {
		// offline: keep the content so a forward link that appears anyway
		// (the operator was wrong about "offline") gets it back.
		b, err := r.d.GetContent(ctx, s.victim)
		if err != nil {
			r.kept.Add(1)
			return
		}
		content = b
	}
	if !r.remove(ctx, s) {
		r.kept.Add(1)
		return
	}
	r.removed.Add(1)
	if s.kind == StaleReverse && r.opts.Review != nil {
		r.opts.Review(ctx, s.link.Blob)
	}
	if content != nil {
		r.restore(ctx, s, content)
	}
}

// fence takes link's fence, or with Offline none. ok is false when removing
// is not safe.
func (r *rebuild) fence(ctx context.Context, link reclaim.Object) (release func(), ok bool) {
	switch {
	case r.opts.Fencer != nil:
		release, err := r.opts.Fencer.FenceLink(ctx, link)
		return release, err == nil
	case r.opts.Offline:
		return func() {}, true
	}
	return nil, false
}

// remove checks the forward link once more right before destroying, then
// removes s.victim. It returns false when it kept it.
func (r *rebuild) remove(ctx context.Context, s stale) bool {
	if r.forwardMayExist(ctx, s.forward) {
		return false
	}
	if h := r.opts.beforeDel; h != nil {
		h()
	}
	remove := s.remove
	if remove == nil {
		remove = func(ctx context.Context) error { return r.d.Delete(ctx, s.victim) }
	}
	if err := remove(ctx); err != nil && !layout.IsNotFound(err) {
		r.f.add(Problem{Kind: Unreadable, Path: s.victim, Repo: s.link.Repo, Digest: s.link.Blob, Detail: "delete: " + err.Error()})
		return false
	}
	return true
}

// restore puts s.victim back when its forward link appeared after all.
func (r *rebuild) restore(ctx context.Context, s stale, content []byte) {
	if !r.forwardMayExist(ctx, s.forward) {
		return
	}
	if err := r.d.PutContent(ctx, s.victim, content); err != nil {
		r.f.add(Problem{Kind: MissingReverse, Path: s.victim, Repo: s.link.Repo, Digest: s.link.Blob, Detail: "restore: " + err.Error()})
		return
	}
	r.restored.Add(1)
}

// forwardMayExist is false only when Stat says the forward link is absent.
func (r *rebuild) forwardMayExist(ctx context.Context, forward string) bool {
	_, err := r.d.Stat(ctx, forward)
	return !layout.IsNotFound(err)
}
