package gc

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/opencontainers/go-digest"
)

func isNotFound(err error) bool {
	var nf storagedriver.PathNotFoundError
	return errors.As(err, &nf)
}

// splitDigest parses the "<alg>/<hex>" of a link path.
func splitDigest(alg, hex string) (digest.Digest, bool) {
	d := digest.NewDigestFromEncoded(digest.Algorithm(alg), hex)
	return d, d.Validate() == nil
}

// readTags re-reads every tag's current link; the sweep uses it right
// before deleting manifests.
func readTags(ctx context.Context, d storagedriver.StorageDriver, repo string) (map[digest.Digest][]string, error) {
	names, err := d.List(ctx, tagsPath(repo))
	if isNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[digest.Digest][]string{}
	for _, n := range names {
		tag := n[strings.LastIndex(n, "/")+1:]
		p := tagCurrentPath(repo, tag)
		dg, err := readLink(ctx, d, p)
		if isNotFound(err) {
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

// probeLink looks at link path p by listing its directory, for when a walk or
// a read did not find a file there. It is false when the listing has no such
// entry (or no directory); true when a file is there now. An entry that is a
// directory, or that the listing shows but Stat does not find (a dangling
// symlink, which Walk leaves out), is an error wrapping errNotALink: never
// "absent".
func probeLink(ctx context.Context, d storagedriver.StorageDriver, p string) (bool, error) {
	for round := 0; ; round++ {
		if ok, err := listed(ctx, d, p); err != nil || !ok {
			return false, err
		}
		fi, err := d.Stat(ctx, p)
		switch {
		case isNotFound(err) && round == 0:
			// Deleted (perhaps re-created) between the listing and
			// the stat, or there to stay: look once more.
			continue
		case isNotFound(err):
			return false, fmt.Errorf("%s: %w: listed, but not found by stat (a dangling symlink?)", p, errNotALink)
		case err != nil:
			return false, err
		case fi.IsDir():
			return false, fmt.Errorf("%s: %w: a directory", p, errNotALink)
		}
		return true, nil
	}
}

// listed reports whether the listing of p's directory names p.
func listed(ctx context.Context, d storagedriver.StorageDriver, p string) (bool, error) {
	names, err := d.List(ctx, path.Dir(p))
	if isNotFound(err) {
		return false, nil
	}
	return slices.Contains(names, p), err
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
