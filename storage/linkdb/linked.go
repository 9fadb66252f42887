package linkdb

import (
	"context"
	"fmt"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/referrers"
)

// maxManifestSize bounds what rebuild and verify read to look for a subject.
// It is Distribution's own limit for a manifest PUT, so a revision link to
// anything larger does not point at a manifest.
const maxManifestSize = 4 << 20

// badLinkContent says what is wrong with b as the content of a link to d
// ("" when nothing is), and names the digest b holds instead, if any.
func badLinkContent(b []byte, d digest.Digest) (detail string, names digest.Digest) {
	if WellFormedLink(b, d) {
		return "", ""
	}
	if content, err := digest.Parse(string(b)); err == nil {
		return fmt.Sprintf("content names %s", content), content
	}
	return fmt.Sprintf("content: %s; want %s", describe(b), d), ""
}

// statBlobData looks at the data of the blob l links. The problem, if any,
// is a missing blob (BrokenForward, at the link), data that is a directory
// (Corrupt), or a failed stat (Unreadable).
func statBlobData(ctx context.Context, d storagedriver.StorageDriver, l forwardLink) (storagedriver.FileInfo, *Problem) {
	data := layout.BlobDataPath(l.Blob)
	fi, err := d.Stat(ctx, data)
	switch {
	case layout.IsNotFound(err):
		return nil, &Problem{Kind: BrokenForward, Path: l.Path, Repo: l.Repo, Digest: l.Blob}
	case err != nil:
		return nil, &Problem{Kind: Unreadable, Path: data, Repo: l.Repo, Digest: l.Blob, Detail: err.Error()}
	case fi.IsDir():
		return nil, &Problem{Kind: Corrupt, Path: data, Repo: l.Repo, Digest: l.Blob, Detail: "blob data is a directory"}
	}
	return fi, nil
}

// manifestSubject reads the manifest revision l links, whose data fi
// describes, for an OCI subject. ok is false when it has none, or is larger
// than any manifest Distribution accepts. Content that does not match its
// digest or does not parse is Corrupt: GC aborts on it (manifest_unreadable).
func manifestSubject(ctx context.Context, d storagedriver.StorageDriver, l forwardLink, fi storagedriver.FileInfo) (subject digest.Digest, desc v1.Descriptor, ok bool, p *Problem) {
	if fi.Size() > maxManifestSize {
		return "", desc, false, nil
	}
	data := layout.BlobDataPath(l.Blob)
	problem := func(k Kind, detail string) *Problem {
		return &Problem{Kind: k, Path: data, Repo: l.Repo, Digest: l.Blob, Detail: detail}
	}
	payload, err := d.GetContent(ctx, data)
	if err != nil {
		return "", desc, false, problem(Unreadable, err.Error())
	}
	if l.Blob.Algorithm().FromBytes(payload) != l.Blob {
		return "", desc, false, problem(Corrupt, fmt.Sprintf("manifest content (%d bytes) does not match its digest", len(payload)))
	}
	subject, desc, ok, err = referrers.Of(payload, l.Blob, "")
	if err != nil {
		return "", desc, false, problem(Corrupt, err.Error())
	}
	return subject, desc, ok, nil
}
