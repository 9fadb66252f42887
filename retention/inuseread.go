package retention

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/retention/inuse"
)

// Index reads the in-use index (retention/redisstore.InUse).
type Index interface {
	Sources(ctx context.Context) ([]inuse.Source, error)
	Images(ctx context.Context, name string) (inuse.Source, []inuse.Image, error)
}

// indexView is what one read of the index says about one repository.
type indexView struct {
	digests map[digest.Digest]bool
	asOf    time.Time
	skip    *Skip
}

// sorted lists the view's in-use manifests in order.
func (v *indexView) sorted() []digest.Digest {
	out := make([]digest.Digest, 0, len(v.digests))
	for d := range v.digests {
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}

// readIndex reads every source and keeps repo's images. It aborts when the
// index is unreadable, empty or stale (older than maxAge at now), and
// skips repo when a source p relies on is unreadable, empty or missing.
func readIndex(ctx context.Context, idx Index, repo string, p Policy, maxAge time.Duration, now time.Time) (*indexView, error) {
	srcs, err := idx.Sources(ctx)
	if err != nil {
		return nil, abort(reclaim.AbortInUseUnreadable, "list sources: %v", err)
	}
	total, byName := 0, map[string]inuse.Source{}
	v := &indexView{digests: map[digest.Digest]bool{}, asOf: now}
	for _, s := range srcs {
		total += s.Images
		byName[s.Name] = s
		if s.UpdatedAt.Before(v.asOf) {
			v.asOf = s.UpdatedAt
		}
		if age := now.Sub(s.UpdatedAt); age > maxAge {
			return nil, abort(reclaim.AbortInUseStale, "source %s was updated %v ago, more than retention.inusemaxage %v", s.Name, age.Round(time.Second), maxAge)
		}
	}
	if total == 0 {
		return nil, abort(reclaim.AbortInUseEmpty, "no source declares any image (%d sources)", len(srcs))
	}
	names := p.Sources
	if len(names) == 0 {
		for _, s := range srcs {
			names = append(names, s.Name)
		}
	}
	for _, name := range names {
		if s, ok := byName[name]; !ok || s.Images == 0 {
			v.skip = &Skip{Reason: SkipSourceEmpty, Detail: "source " + name + " is missing or declares no image"}
			return v, nil
		}
		_, images, err := idx.Images(ctx, name)
		if errors.Is(err, ErrSourceNotFound) {
			v.skip = &Skip{Reason: SkipSourceEmpty, Detail: "source " + name + " is missing"}
			return v, nil
		}
		if err != nil {
			v.skip = &Skip{Reason: SkipSourceUnreadable, Detail: err.Error()}
			return v, nil
		}
		for _, im := range images {
			if im.Repository == repo {
				v.digests[im.Digest] = true
			}
		}
	}
	return v, nil
}

// Manifests reads manifests of a repository (storage).
type Manifests interface {
	// Children reads manifest d of repo: whether it is there, and the
	// manifests it lists when it is an index. An error is a read that
	// failed, never "absent".
	Children(ctx context.Context, repo string, d digest.Digest) (present bool, children []digest.Digest, err error)
}

// versionsInUse maps the in-use digests of a repository to its versions: a
// version is in use when its manifest is, or a manifest its index lists.
// An in-use manifest that is no version's and cannot be read aborts.
func versionsInUse(ctx context.Context, m Manifests, repo string, versions []Version, used map[digest.Digest]bool) (map[digest.Digest]bool, error) {
	out := map[digest.Digest]bool{}
	var orphans []digest.Digest
	byDigest := map[digest.Digest]bool{}
	for _, v := range versions {
		byDigest[v.Digest] = true
	}
	for d := range used {
		if byDigest[d] {
			out[d] = true
			continue
		}
		present, _, err := m.Children(ctx, repo, d)
		if err != nil {
			return nil, abort(reclaim.AbortInUseVersionUnreadable, "%s@%s: %v", repo, d, err)
		}
		if present {
			orphans = append(orphans, d)
		}
	}
	if len(orphans) == 0 {
		return out, nil
	}
	// An in-use manifest no tag names directly: find the indexes that list it.
	for _, v := range versions {
		_, children, err := m.Children(ctx, repo, v.Digest)
		if err != nil {
			return nil, abort(reclaim.AbortInUseVersionUnreadable, "%s@%s (looking for the index of an in-use manifest): %v", repo, v.Digest, err)
		}
		for _, c := range children {
			for _, o := range orphans {
				if c == o {
					out[v.Digest] = true
				}
			}
		}
	}
	return out, nil
}
