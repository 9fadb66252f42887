package linkdb

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// repo checks repo's forward links, referrers index and tags.
func (v *verifier) repo(ctx context.Context, repo string) {
	_ = walkForwardLinks(ctx, v.d, repo, func(l forwardLink) {
		v.forward.Add(1)
		v.opts.Progress.link()
		if l.Bad != "" {
			// Distribution cannot read it; whatever it was meant to
			// link is never called reclaimable.
			v.keep(l.Blob)
			v.f.add(Problem{Kind: Corrupt, Path: l.Path, Repo: repo, Digest: l.Blob, Detail: l.Bad})
			return
		}
		v.forwardLink(ctx, l)
	}, func(base string, err error) error {
		if ctx.Err() == nil {
			v.unreadable(Problem{Kind: Unreadable, Path: base, Repo: repo, Detail: err.Error()})
		}
		return nil
	})
	err := walkReferrers(ctx, v.d, repo, func(l referrerLink) {
		v.refs.Add(1)
		if l.Bad != "" {
			v.f.add(Problem{Kind: Corrupt, Path: l.Path, Repo: repo, Digest: l.Referrer, Detail: l.Bad})
			return
		}
		v.referrerEntry(ctx, repo, l)
	})
	if err != nil && ctx.Err() == nil {
		v.f.add(Problem{Kind: Unreadable, Path: layout.ReferrersIndexDir(repo), Repo: repo, Detail: err.Error()})
	}
	v.tags(ctx, repo)
}

// tags checks repo's tag links: each current link and tag history entry
// must be a file holding a digest (the history entry: the one its path
// names). They are not part of the link database, but GC roots its marking
// in them, so a damaged one is reported with the rest.
func (v *verifier) tags(ctx context.Context, repo string) {
	base := layout.TagsDir(repo)
	isTag := func(p string) bool {
		c := layout.Classify(p)
		return (c.Kind == layout.PathTagCurrent || c.Kind == layout.PathTagIndex) && c.Repo == repo
	}
	withIndex, withCurrent := map[string]bool{}, map[string]bool{}
	err := walkLinks(ctx, v.d, base, isTag, func(e linkEntry) error {
		v.tagLinks.Add(1)
		c := layout.Classify(e.Path)
		if c.Kind == layout.PathTagCurrent {
			withCurrent[c.Tag] = true
		} else {
			withIndex[c.Tag] = true
		}
		if e.Bad != "" {
			v.f.add(Problem{Kind: Corrupt, Path: e.Path, Repo: repo, Digest: c.Digest, Detail: e.Bad})
			return ctx.Err()
		}
		b, err := v.d.GetContent(ctx, e.Path)
		switch {
		case layout.IsNotFound(err): // untagged while we walk
		case err != nil:
			v.f.add(Problem{Kind: Unreadable, Path: e.Path, Repo: repo, Digest: c.Digest, Detail: err.Error()})
		case c.Kind == layout.PathTagIndex && !WellFormedLink(b, c.Digest):
			v.f.add(Problem{Kind: Corrupt, Path: e.Path, Repo: repo, Digest: c.Digest, Detail: "content: " + describe(b)})
		case c.Kind == layout.PathTagCurrent:
			if _, err := digest.Parse(string(b)); err != nil {
				v.f.add(Problem{Kind: Corrupt, Path: e.Path, Repo: repo, Detail: fmt.Sprintf("content: %s: %v", describe(b), err)})
			}
		}
		return ctx.Err()
	})
	if err != nil && ctx.Err() == nil {
		v.f.add(Problem{Kind: Unreadable, Path: base, Repo: repo, Detail: err.Error()})
		return
	}
	v.danglingTags(ctx, repo, withIndex, withCurrent)
}

// danglingTags reports the tags of repo the walk found history entries of
// but no current link: Distribution's tag list names them while a pull
// answers MANIFEST_UNKNOWN. The current link is read again first, so a tag
// written while the walk passed (its index entry lands before its current
// link) is not reported.
func (v *verifier) danglingTags(ctx context.Context, repo string, withIndex, withCurrent map[string]bool) {
	for _, tag := range slices.Sorted(maps.Keys(withIndex)) {
		if withCurrent[tag] || ctx.Err() != nil {
			continue
		}
		dir, p := layout.TagsDir(repo)+"/"+tag, layout.TagCurrentPath(repo, tag)
		_, err := v.d.Stat(ctx, p)
		if layout.IsNotFound(err) {
			// still there without one? (gone: deleted meanwhile)
			if _, err = v.d.Stat(ctx, dir); err == nil {
				v.f.add(Problem{Kind: DanglingTag, Path: dir, Repo: repo,
					Detail: "no current link: the tag list names " + tag + ", a pull of it answers MANIFEST_UNKNOWN"})
				continue
			}
			p = dir
		}
		if err != nil && !layout.IsNotFound(err) {
			v.f.add(Problem{Kind: Unreadable, Path: p, Repo: repo, Detail: err.Error()})
		}
	}
}

// forwardLink checks forward link l: its content, its reverse link, the
// blob it links, and for a manifest with a subject, its referrers entry.
func (v *verifier) forwardLink(ctx context.Context, l forwardLink) {
	if l.ReadErr != nil {
		v.keep(l.Blob)
		v.unreadable(Problem{Kind: Unreadable, Path: l.Path, Repo: l.Repo, Digest: l.Blob, Detail: l.ReadErr.Error()})
		return
	}
	if bad, names := badLinkContent(l.Content, l.Blob); bad != "" {
		if names != "" {
			v.keep(names) // upstream resolves the link by its content
		}
		v.f.add(Problem{Kind: Corrupt, Path: l.Path, Repo: l.Repo, Digest: l.Blob, Detail: bad})
	}
	v.reverseOf(ctx, l)
	fi, p := statBlobData(ctx, v.d, l)
	if p != nil {
		v.f.add(*p)
		return
	}
	if l.Kind != reclaim.LinkManifest {
		return
	}
	subject, _, ok, p := manifestSubject(ctx, v.d, l, fi)
	if p != nil {
		v.f.add(*p)
		return
	}
	if !ok {
		return
	}
	entry := layout.ReferrerLinkPath(l.Repo, subject, l.Blob)
	if _, err := v.d.Stat(ctx, entry); layout.IsNotFound(err) {
		v.f.add(Problem{Kind: MissingReferrer, Path: entry, Repo: l.Repo, Digest: l.Blob, Detail: "subject " + subject.String()})
	} else if err != nil {
		v.f.add(Problem{Kind: Unreadable, Path: entry, Repo: l.Repo, Digest: l.Blob, Detail: err.Error()})
	}
}

// reverseOf checks that forward link l has its reverse link.
func (v *verifier) reverseOf(ctx context.Context, l forwardLink) {
	rp := layout.ReverseLinkPath(l.Blob, l.Repo, l.Kind)
	fi, err := v.d.Stat(ctx, rp)
	switch {
	case err == nil:
		if fi.IsDir() {
			v.keep(l.Blob) // the blob walk reports it as corrupt
		}
	case layout.IsNotFound(err):
		v.missingReverse(ctx, l)
	default:
		v.keep(l.Blob)
		v.f.add(Problem{Kind: Unreadable, Path: rp, Repo: l.Repo, Digest: l.Blob, Detail: err.Error()})
	}
}

// referrerEntry checks entry l of repo's referrers index: a descriptor of
// its referrer, whose manifest revision exists.
func (v *verifier) referrerEntry(ctx context.Context, repo string, l referrerLink) {
	b, err := v.d.GetContent(ctx, l.Path)
	if layout.IsNotFound(err) {
		return
	}
	if err != nil {
		v.f.add(Problem{Kind: Unreadable, Path: l.Path, Repo: repo, Digest: l.Referrer, Detail: err.Error()})
		return
	}
	var desc v1.Descriptor
	if err := json.Unmarshal(b, &desc); err != nil || desc.Digest != l.Referrer {
		v.f.add(Problem{Kind: Corrupt, Path: l.Path, Repo: repo, Digest: l.Referrer, Detail: fmt.Sprintf("not a descriptor of %s: %d bytes (not shown)", l.Referrer, len(b))})
	}
	rev := layout.RevisionLinkPath(repo, l.Referrer)
	if _, err := v.d.Stat(ctx, rev); layout.IsNotFound(err) {
		v.f.add(Problem{Kind: StaleReferrer, Path: l.Path, Repo: repo, Digest: l.Referrer, Detail: "subject " + l.Subject.String()})
	} else if err != nil {
		v.f.add(Problem{Kind: Unreadable, Path: rev, Repo: repo, Digest: l.Referrer, Detail: err.Error()})
	}
}
