package linkdb

import (
	"strings"

	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/storage"
)

// The storage layout is storage's (storage/paths.go, marker.go); linkdb adds
// only its walk roots and the rebuild checkpoint, next to storage's marker
// at the driver root, outside Distribution's tree:
//
//	/reclaim/rebuild/checkpoint    rebuild progress (JSON), see checkpoint.go
const (
	reposDir = storage.RootPath + "/repositories"
	blobsDir = storage.RootPath + "/blobs"

	checkpointPath = "/reclaim/rebuild/checkpoint"

	layersDir    = string(storage.LinkLayer)
	manifestsDir = string(storage.LinkManifest)
)

func repoDir(repo string) string { return storage.RepositoryPath(repo) }

func layersRoot(repo string) string    { return repoDir(repo) + "/_layers" }
func revisionsRoot(repo string) string { return repoDir(repo) + "/_manifests/revisions" }
func referrersRoot(repo string) string { return repoDir(repo) + "/_manifests/referrers" }
func tagsRoot(repo string) string      { return repoDir(repo) + "/_manifests/tags" }

// forwardLinkPath is the forward link a reverse link of kind mirrors.
func forwardLinkPath(repo string, d digest.Digest, kind string) string {
	return storage.ForwardLinkPath(repo, d, storage.LinkKind(kind))
}

func reverseLinkPath(d digest.Digest, repo, kind string) string {
	return storage.ReverseLinkPath(d, repo, storage.LinkKind(kind))
}

// parseLink classifies a file found under a repository's _layers or
// _manifests/revisions directory. ok is false for anything that is not a
// well-formed link of repo: the walk ignores it, as Distribution does.
func parseLink(repo, p string) (d digest.Digest, ok bool) {
	c := storage.Classify(p)
	if (c.Kind != storage.KindLayerLink && c.Kind != storage.KindRevisionLink) || c.Repo != repo {
		return "", false
	}
	return c.Digest, true
}

// parseReferrerLink classifies a file under a repository's referrers index.
func parseReferrerLink(repo, p string) (subject, referrer digest.Digest, ok bool) {
	c := storage.Classify(p)
	if c.Kind != storage.KindReferrerLink || c.Repo != repo {
		return "", "", false
	}
	return c.Digest, c.Referrer, true
}

// blobPath is what a path inside the blob store is, for the blob walk.
type blobPath struct {
	digest  digest.Digest
	dir     string // blobs/<alg>/<2>/<hex>, which groups the walk by blob
	isData  bool
	reverse bool   // a reverse link file
	repo    string // reverse links only
	kind    string // reverse links only: _layers or _manifests
}

// parseBlobPath classifies p, a path under blobs/<alg>/<2>/. ok is false for
// paths that are not under a well-formed blob directory. Paths between the
// blob directory and a reverse link (_repositories/<name>/...) are ok with
// only digest and dir set.
func parseBlobPath(p string) (bp blobPath, ok bool) {
	rel, found := strings.CutPrefix(p, blobsDir+"/")
	if !found {
		return bp, false
	}
	parts := strings.SplitN(rel, "/", 4) // alg, 2, hex, rest
	if len(parts) < 3 {
		return bp, false
	}
	dir := blobsDir + "/" + parts[0] + "/" + parts[1] + "/" + parts[2]
	c := storage.Classify(dir)
	if c.Kind != storage.KindBlobDir {
		return bp, false
	}
	bp.digest, bp.dir = c.Digest, dir
	if len(parts) == 3 {
		return bp, true
	}
	switch c := storage.Classify(p); c.Kind {
	case storage.KindBlobData:
		bp.isData = true
	case storage.KindReverseLink:
		bp.reverse, bp.repo, bp.kind = true, c.Repo, string(c.LinkKind)
	}
	return bp, true
}
