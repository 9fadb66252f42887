package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/retention"
	"github.com/reclaim-registry/reclaim/storage"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// retentionStorage is retention's view of storage: tags and manifests read
// below the middleware (reading records no access), tags deleted through
// it, exactly as Distribution's tag DELETE does (the tag's directory).
type retentionStorage struct {
	raw, driver storagedriver.StorageDriver
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

// DeleteTag removes the tag's directory through the middleware.
func (s retentionStorage) DeleteTag(ctx context.Context, repo, tag string) error {
	err := s.driver.Delete(storage.WithoutAccessRecords(ctx), layout.TagsDir(repo)+"/"+tag)
	if layout.IsNotFound(err) {
		return nil
	}
	return err
}

// Children reads manifest d of repo: present when its revision link is,
// and the manifests it lists when it is an index.
func (s retentionStorage) Children(ctx context.Context, repo string, d digest.Digest) (bool, []digest.Digest, error) {
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
