package collector

import (
	"context"
	"errors"
	"fmt"
	"strings"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// readTags re-reads every tag's current link; the delete phase uses it right
// before deleting manifests.
func readTags(ctx context.Context, d storagedriver.StorageDriver, repo string) (map[digest.Digest][]string, error) {
	names, err := d.List(ctx, layout.TagsDir(repo))
	if layout.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[digest.Digest][]string{}
	for _, n := range names {
		tag := n[strings.LastIndex(n, "/")+1:]
		p := layout.TagCurrentPath(repo, tag)
		dg, err := readLink(ctx, d, p)
		if layout.IsNotFound(err) {
			// Deleted since the listing, unless the link entry is still
			// there and cannot be read (a dangling symlink): not "untagged".
			present, perr := probeLink(ctx, d, p)
			if perr != nil {
				return nil, fmt.Errorf("tag %s: %w", tag, perr)
			}
			if !present {
				continue
			}
			if dg, err = readLink(ctx, d, p); err != nil {
				return nil, err
			}
		}
		if err != nil {
			return nil, err
		}
		out[dg] = append(out[dg], tag)
	}
	return out, nil
}

// errNotALink: something sits at a link path that is not a link file.
var errNotALink = errors.New("not a link file")

// probeLink looks at link path p when a walk or a read did not find a file
// there: false when nothing is there, true for a file, and an error wrapping
// errNotALink for anything else (never "absent").
func probeLink(ctx context.Context, d storagedriver.StorageDriver, p string) (bool, error) {
	present, _, problem, err := layout.Probe(ctx, d, p)
	if problem != "" {
		return false, fmt.Errorf("%s: %w: %s", p, errNotALink, problem)
	}
	return present, err
}

func readLink(ctx context.Context, d storagedriver.StorageDriver, p string) (digest.Digest, error) {
	b, err := d.GetContent(ctx, p)
	if err != nil {
		return "", err
	}
	dg, err := digest.Parse(strings.TrimSpace(string(b)))
	if err != nil {
		return "", fmt.Errorf("link %s: %w", p, err)
	}
	return dg, nil
}

// linksFor reads the reverse links of blob that decide whether repo may
// let it go: enough of them (LinkIndex.ListFor).
func linksFor(ctx context.Context, idx LinkIndex, blob digest.Digest, repo string) ([]reclaim.RepoLink, error) {
	return idx.ListFor(ctx, blob, repo)
}
