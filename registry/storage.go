package registry

// What the GC API and retention ask of storage, on the storage Env: the
// reads gcapi.Config's funcs make (below the middleware, so asking records
// no access), and retention's view of tags and manifests with its
// compare-and-delete of a tag.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/reclaim/trashentry"
	"github.com/reclaim-registry/reclaim/redisstate"
	"github.com/reclaim-registry/reclaim/retention"
	"github.com/reclaim-registry/reclaim/retention/pin"
	"github.com/reclaim-registry/reclaim/storage/budget"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/linkdb"
	"github.com/reclaim-registry/reclaim/storage/middleware"
	"github.com/reclaim-registry/reclaim/trash"
)

// hasVersion is gcapi.Config.HasVersion on d: a tag has a current link, a
// manifest a revision link. Read below the middleware: asking records no
// access.
func hasVersion(d storagedriver.StorageDriver) func(ctx context.Context, repo string, ref pin.Ref) (bool, error) {
	return func(ctx context.Context, repo string, ref pin.Ref) (bool, error) {
		var p string
		if ref.Tag != "" {
			p = layout.TagCurrentPath(repo, ref.Tag)
		} else {
			p = layout.RevisionLinkPath(repo, ref.Digest)
		}
		_, err := d.Stat(ctx, p)
		switch {
		case err == nil:
			return true, nil
		case layout.IsNotFound(err):
			return false, nil
		}
		return false, err
	}
}

// manifestFenced is gcapi.Config.Fenced on the tracker.
func manifestFenced(t *redisstate.Tracker) func(ctx context.Context, repo string, d digest.Digest) (bool, error) {
	return func(ctx context.Context, repo string, d digest.Digest) (bool, error) {
		return t.Fenced(ctx, reclaim.Object{Blob: d, Repo: repo, Kind: reclaim.LinkManifest})
	}
}

// storageStatus is gcapi.Config.Status: whether Redis has recorded for a full
// window and whether the link database is complete.
func storageStatus(env *middleware.Env) func(ctx context.Context) map[string]any {
	return func(ctx context.Context) map[string]any {
		out := map[string]any{"window_seconds": int64(env.Window.Seconds()), "embedded_redis": env.Embedded}
		if since, err := env.Tracker.RecordingSince(ctx); err != nil {
			out["redis"] = err.Error()
		} else {
			out["redis"] = "ok"
			out["recording_since"] = since.UTC()
			out["trusted"] = time.Since(since) >= env.Window
		}
		if since, ok, err := linkdb.LinkDBComplete(ctx, env.Raw); err != nil {
			out["linkdb"] = err.Error()
		} else {
			out["linkdb_complete"] = ok
			if ok {
				out["linkdb_complete_since"] = since.UTC()
			}
		}
		return out
	}
}

// repositoryExists is gcapi.Config.Exists on d: a repository exists when it
// has a _manifests or a _layers directory (the collector's own definition).
// Any error other than "not found" is returned, never taken for absent.
func repositoryExists(d storagedriver.StorageDriver) func(ctx context.Context, repo string) (bool, error) {
	return func(ctx context.Context, repo string) (bool, error) {
		for _, sub := range []string{"/_manifests", "/_layers"} {
			_, err := d.Stat(ctx, layout.RepositoryPath(repo)+sub)
			var nf storagedriver.PathNotFoundError
			switch {
			case err == nil:
				return true, nil
			case !errors.As(err, &nf):
				return false, err
			}
		}
		return false, nil
	}
}

// retentionStorage is retention's view of storage: tags and manifests read
// below the middleware (reading records no access), tags deleted through
// it, exactly as Distribution's tag DELETE does (the tag's directory).
type retentionStorage struct {
	raw, driver storagedriver.StorageDriver
	fences      *redisstate.Tracker // tag fences: DeleteTag
	trash       *trash.Bin          // nil: the trash is off
}

var (
	_ retention.Tags      = retentionStorage{}
	_ retention.Manifests = retentionStorage{}
	_ retention.TagWriter = retentionStorage{}
)

// Tags lists the tags of repo: one List, then per tag one Stat (the link
// time) and one read (the digest) of its current link. A repository
// without a tags directory has no tags; any other error, including a tag
// whose link cannot be read, fails the whole list.
func (s retentionStorage) Tags(ctx context.Context, repo string) ([]retention.TagInfo, error) {
	ctx = budget.Mark(ctx) // retention's reads are GC's: within its budget
	names, err := s.raw.List(ctx, layout.TagsDir(repo))
	if layout.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list tags of %s: %w", repo, err)
	}
	out := make([]retention.TagInfo, 0, len(names))
	for _, n := range names {
		tag := n[strings.LastIndexByte(n, '/')+1:]
		p := layout.TagCurrentPath(repo, tag)
		fi, err := s.raw.Stat(ctx, p)
		if layout.IsNotFound(err) {
			continue // deleted since the listing, or a tag being written
		}
		if err != nil {
			return nil, fmt.Errorf("stat tag %s of %s: %w", tag, repo, err)
		}
		d, ok, err := s.Tag(ctx, repo, tag)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, retention.TagInfo{Name: tag, Digest: d, Time: fi.ModTime()})
		}
	}
	return out, nil
}

// Tag reads the current link of tag.
func (s retentionStorage) Tag(ctx context.Context, repo, tag string) (digest.Digest, bool, error) {
	ctx = budget.Mark(ctx)
	b, err := s.raw.GetContent(ctx, layout.TagCurrentPath(repo, tag))
	if layout.IsNotFound(err) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("read tag %s of %s: %w", tag, repo, err)
	}
	d, err := digest.Parse(strings.TrimSpace(string(b)))
	if err != nil {
		return "", false, fmt.Errorf("tag %s of %s: link %q: %w", tag, repo, b, err)
	}
	return d, true, nil
}

// tagFenceLease bounds how long a retention apply that died holds a tag's
// fence: pushes moving that tag wait out fencewait and then answer 503
// until it expires.
const tagFenceLease = time.Minute

// DeleteTag is retention's compare-and-delete of a tag (see
// retention.TagWriter, redisstate/tagfence.go): fence the tag and mark
// its planned manifest (a pin PUT checks both after it wrote the pin), read
// the tag again and run check under the fence, confirm the fence, write
// the tag's trash hold when the trash is on, delete the tag's directory
// through the middleware exactly as Distribution's tag DELETE does,
// release.
func (s retentionStorage) DeleteTag(ctx context.Context, td retention.TagDelete, check func(context.Context) (retention.LeftReason, string)) (retention.LeftReason, string, string) {
	repo, tag, want := td.Repo, td.Tag, td.Want
	f, err := s.fences.FenceTag(ctx, repo, tag, tagFenceLease)
	if err != nil {
		return retention.ChangedCheckFail, "fence tag: " + err.Error(), ""
	}
	defer func() { _ = s.fences.Release(context.WithoutCancel(ctx), f) }()
	// and marks the manifest, which a pin by digest asks about after it
	// wrote the pin: the pins read below sees the pin, or the pin is 409
	mf, err := s.fences.Mark(ctx, reclaim.Object{Blob: want, Repo: repo, Kind: reclaim.LinkManifest}, tagFenceLease)
	if err != nil {
		return retention.ChangedCheckFail, "fence manifest: " + err.Error(), ""
	}
	defer func() { _ = s.fences.Release(context.WithoutCancel(ctx), mf) }()
	d, ok, err := s.Tag(ctx, repo, tag)
	switch {
	case err != nil:
		return retention.ChangedCheckFail, "read tag: " + err.Error(), ""
	case !ok:
		return retention.ChangedTagGone, "", ""
	case d != want:
		return retention.ChangedTagMoved, "now " + d.String(), ""
	}
	if reason, detail := check(ctx); reason != "" {
		return reason, detail, ""
	}
	if err := s.fences.Confirm(ctx, f, tagFenceLease); err != nil {
		return retention.ChangedCheckFail, err.Error(), ""
	}
	var held trashentry.Entry
	if s.trash != nil {
		// the hold first: a crash before the delete leaves a hold on a
		// tagged manifest (data kept longer), never a lost tag's record
		held, err = s.trash.Hold(ctx, trashentry.Entry{Kind: reclaim.KindTag, Repo: repo, Tag: tag, Digest: want,
			Reason: "retention", By: "retention", Plan: td.Plan})
		if err != nil {
			return retention.ChangedCheckFail, "write trash hold: " + err.Error(), ""
		}
	}
	err = s.driver.Delete(middleware.ForGC(ctx), layout.TagsDir(repo)+"/"+tag)
	if err != nil && !layout.IsNotFound(err) {
		if held.ID != "" {
			_ = s.trash.Drop(context.WithoutCancel(ctx), held)
		}
		return retention.ChangedDeleteErr, err.Error(), ""
	}
	return "", "", held.ID
}

// Children reads manifest d of repo: present when its revision link is,
// and the manifests it lists when it is an index.
func (s retentionStorage) Children(ctx context.Context, repo string, d digest.Digest) (bool, []digest.Digest, error) {
	ctx = budget.Mark(ctx)
	_, err := s.raw.Stat(ctx, layout.RevisionLinkPath(repo, d))
	if layout.IsNotFound(err) {
		return false, nil, nil
	}
	if err != nil {
		return false, nil, err
	}
	b, err := s.raw.GetContent(ctx, layout.BlobDataPath(d))
	if err != nil {
		return false, nil, fmt.Errorf("read manifest %s: %w", d, err)
	}
	var m struct {
		Manifests []struct {
			Digest digest.Digest `json:"digest"`
		} `json:"manifests"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return false, nil, fmt.Errorf("manifest %s: %w", d, err)
	}
	out := make([]digest.Digest, len(m.Manifests))
	for i, c := range m.Manifests {
		out[i] = c.Digest
	}
	return true, out, nil
}
