package linkdb

import (
	"context"
	"fmt"
	"sync/atomic"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// repositories is phase 1: forward -> reverse, and the referrers index.
// incomplete is true when some repository could not be read or is damaged.
func (r *rebuild) repositories(ctx context.Context) (incomplete bool, err error) {
	repos, unreadable, err := repositories(ctx, r.d, r.opts.Workers)
	if err != nil {
		return true, err
	}
	for _, p := range unreadable {
		r.f.add(p)
		incomplete = true
	}
	r.res.Repositories = len(repos)
	skipped, failed, err := r.phase(ctx, "repositories", repos, r.doneRepos, r.opts.repoDone, func(repo string) bool {
		ok, err := r.repo(ctx, repo)
		if err != nil && ctx.Err() == nil {
			r.f.add(Problem{Kind: Unreadable, Path: layout.RepositoryPath(repo), Repo: repo, Detail: err.Error()})
		}
		return ok && err == nil
	})
	r.res.RepositoriesSkipped = skipped
	return incomplete || failed, err
}

// repo rebuilds one repository. ok is false when some link could not be
// read or is damaged, so the repository is not known to be covered.
func (r *rebuild) repo(ctx context.Context, repo string) (ok bool, err error) {
	var failed atomic.Bool
	err = walkForwardLinks(ctx, r.d, repo, func(l forwardLink) {
		r.forward.Add(1)
		r.opts.Progress.link()
		if l.Bad != "" {
			r.damage(Problem{Kind: Corrupt, Path: l.Path, Repo: repo, Digest: l.Blob, Detail: l.Bad})
			failed.Store(true)
			return
		}
		if !r.forwardLink(ctx, l) {
			failed.Store(true)
		}
	}, func(base string, err error) error {
		return fmt.Errorf("walk %s: %w", base, err)
	})
	if err != nil {
		return false, err
	}
	if err := walkReferrers(ctx, r.d, repo, func(l referrerLink) { r.referrerEntry(ctx, repo, l) }); err != nil {
		// The referrers index is not part of the reverse-link database's
		// completeness; report and go on.
		r.f.add(Problem{Kind: Unreadable, Path: layout.ReferrersIndexDir(repo), Repo: repo, Detail: err.Error()})
	}
	return !failed.Load(), ctx.Err()
}

// referrerEntry removes the referrers index entry l when its referrer's
// manifest revision is gone.
func (r *rebuild) referrerEntry(ctx context.Context, repo string, l referrerLink) {
	if l.Bad != "" {
		// Not part of the link database: reported, not repaired.
		r.f.add(Problem{Kind: Corrupt, Path: l.Path, Repo: repo, Digest: l.Referrer, Detail: l.Bad})
		return
	}
	rev := layout.RevisionLinkPath(repo, l.Referrer)
	_, err := r.d.Stat(ctx, rev)
	switch {
	case err == nil:
	case layout.IsNotFound(err):
		r.removeStale(ctx, stale{kind: StaleReferrer, link: reclaim.Object{Blob: l.Referrer, Repo: repo, Kind: reclaim.LinkManifest},
			forward: rev, victim: l.Path, modTime: l.Info.ModTime(),
			remove: func(ctx context.Context) error { return r.referrers.Remove(ctx, repo, l.Subject, l.Referrer) }})
	default:
		r.f.add(Problem{Kind: Unreadable, Path: rev, Repo: repo, Digest: l.Referrer, Detail: err.Error()})
	}
}

// forwardLink makes sure forward link l has a well-formed reverse link,
// and for a manifest, its referrers entry. It returns false when the link
// could not be read, the reverse link not written, or either (or the
// manifest) is damaged.
func (r *rebuild) forwardLink(ctx context.Context, l forwardLink) bool {
	if l.ReadErr != nil {
		r.f.add(Problem{Kind: Unreadable, Path: l.Path, Repo: l.Repo, Digest: l.Blob, Detail: l.ReadErr.Error()})
		return false
	}
	ok := true
	bad, _ := badLinkContent(l.Content, l.Blob)
	if bad != "" {
		// Fail safe: the path still names a blob; keep it linked below.
		// The link itself is Distribution's: not ours to rewrite.
		r.damage(Problem{Kind: Corrupt, Path: l.Path, Repo: l.Repo, Digest: l.Blob, Detail: bad})
		ok = false
	}
	if !r.reverseOf(ctx, l) {
		return false
	}
	fi, p := statBlobData(ctx, r.d, l)
	if p != nil {
		r.problem(*p)
		// A link to data already gone has its reverse link all the
		// same: it does not make the database incomplete (ErrBroken).
		return ok && p.Kind == BrokenForward
	}
	if l.Kind == reclaim.LinkManifest && bad == "" {
		ok = r.referrer(ctx, l, fi) && ok
	}
	return ok
}

// reverseOf writes the reverse link of l when it is missing or holds bad
// content (what ReverseLinks.Ensure does, with a dry run and each case
// counted or reported; a dry run lists the missing ones as verify does). It returns false when it could not, or found damage.
func (r *rebuild) reverseOf(ctx context.Context, l forwardLink) bool {
	rl := reclaim.RepoLink{Repo: l.Repo, Kind: l.Kind}
	rp := layout.ReverseLinkPath(l.Blob, l.Repo, l.Kind)
	st, err := r.links.Look(ctx, l.Blob, rl)
	switch st {
	case LinkDirectory:
		// A directory cannot be replaced in one step, and removing it
		// first would leave the forward link without a reverse link
		// while registries serve: left to the operator.
		r.damage(Problem{Kind: Corrupt, Path: rp, Repo: l.Repo, Digest: l.Blob, Detail: "a directory, not a link file: remove it, then run rebuild again"})
		return false
	case LinkBadContent:
		// Bad content: rewrite it. PutContent replaces the file in one
		// step, so the link never reads as absent meanwhile.
		if !r.put(ctx, l.Blob, rl, "rewrite: ") {
			return false
		}
		r.rewritten.Add(1)
	case LinkPresent:
		r.present.Add(1)
	case LinkMissing:
		if r.opts.DryRun {
			r.f.add(Problem{Kind: MissingReverse, Path: l.Path, Repo: l.Repo, Digest: l.Blob})
		}
		if !r.put(ctx, l.Blob, rl, "") {
			return false
		}
		r.added.Add(1)
	default:
		r.f.add(Problem{Kind: Unreadable, Path: rp, Repo: l.Repo, Digest: l.Blob, Detail: err.Error()})
		return false
	}
	return true
}

// put writes reverse link (blob, l), unless dry-run.
func (r *rebuild) put(ctx context.Context, blob digest.Digest, l reclaim.RepoLink, what string) bool {
	if r.opts.DryRun {
		return true
	}
	if err := r.links.Put(ctx, blob, l); err != nil {
		r.f.add(Problem{Kind: Unreadable, Path: layout.ReverseLinkPath(blob, l.Repo, l.Kind), Repo: l.Repo, Digest: blob, Detail: what + err.Error()})
		return false
	}
	return true
}

// referrer adds the manifest l links, whose data fi describes, to the
// referrers index if it has a subject and is not listed yet. It returns
// false when the manifest is damaged or unreadable: GC could not read it
// either (it aborts that repository), so a rebuild that calls itself
// finished must not either.
func (r *rebuild) referrer(ctx context.Context, l forwardLink, fi storagedriver.FileInfo) bool {
	subject, desc, ok, p := manifestSubject(ctx, r.d, l, fi)
	if p != nil {
		r.problem(*p)
		return false
	}
	if !ok {
		return true
	}
	entry := layout.ReferrerLinkPath(l.Repo, subject, l.Blob)
	if _, err := r.d.Stat(ctx, entry); err == nil {
		return true
	} else if !layout.IsNotFound(err) {
		r.f.add(Problem{Kind: Unreadable, Path: entry, Repo: l.Repo, Digest: l.Blob, Detail: err.Error()})
		return false
	}
	if r.opts.DryRun {
		r.f.add(Problem{Kind: MissingReferrer, Path: entry, Repo: l.Repo, Digest: l.Blob, Detail: "subject " + subject.String()})
		r.refAdded.Add(1)
		return true
	}
	// The entry follows the revision link rather than being added: a
	// DELETE of the manifest since the walk read its link has made its own
	// entry follow the link, and an Add after that would list a manifest
	// that is gone (docs/referrers.md, "Consistency").
	linked, err := r.referrers.Follow(ctx, l.Repo, subject, desc)
	if err != nil {
		r.f.add(Problem{Kind: Unreadable, Path: entry, Repo: l.Repo, Digest: l.Blob, Detail: "write: " + err.Error()})
		return false
	}
	if linked {
		r.refAdded.Add(1)
	}
	return true
}
