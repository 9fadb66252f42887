package linkdb

import (
	"strings"

	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// The storage layout is storage's (storage/paths.go, marker.go); linkdb adds
// only its walk roots and the rebuild checkpoint, next to storage's marker
// at the driver root, outside Distribution's tree:
//
//	/reclaim/rebuild/checkpoint    rebuild progress (JSON), see checkpoint.go
const (
	reposDir = layout.RootPath + "/repositories"
	blobsDir = layout.RootPath + "/blobs"

	checkpointPath = "/reclaim/rebuild/checkpoint"

	layersDir    = string(layout.LinkLayer)
	manifestsDir = string(layout.LinkManifest)
)

func repoDir(repo string) string { return layout.RepositoryPath(repo) }

func layersRoot(repo string) string    { return repoDir(repo) + "/_layers" }
func revisionsRoot(repo string) string { return repoDir(repo) + "/_manifests/revisions" }
func referrersRoot(repo string) string { return repoDir(repo) + "/_manifests/referrers" }
func tagsRoot(repo string) string      { return repoDir(repo) + "/_manifests/tags" }

// forwardLinkPath is the forward link a reverse link of kind mirrors.
func forwardLinkPath(repo string, d digest.Digest, kind string) string {
	return layout.ForwardLinkPath(repo, d, layout.LinkKind(kind))
}

func reverseLinkPath(d digest.Digest, repo, kind string) string {
	return layout.ReverseLinkPath(d, repo, layout.LinkKind(kind))
}

// parseLink classifies a file found under a repository's _layers or
// _manifests/revisions directory. ok is false for anything that is not a
// well-formed link of repo: the walk ignores it, as Distribution does.
func parseLink(repo, p string) (d digest.Digest, ok bool) {
	c := layout.Classify(p)
	if (c.Kind != layout.KindLayerLink && c.Kind != layout.KindRevisionLink) || c.Repo != repo {
		return "", false
	}
	return c.Digest, true
}

// parseReferrerLink classifies a file under a repository's referrers index.
func parseReferrerLink(repo, p string) (subject, referrer digest.Digest, ok bool) {
	c := layout.Classify(p)
	if c.Kind != layout.KindReferrerLink || c.Repo != repo {
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
	c := layout.Classify(dir)
	if c.Kind != layout.KindBlobDir {
		return bp, false
	}
	bp.digest, bp.dir = c.Digest, dir
	if len(parts) == 3 {
		return bp, true
	}
	switch c := layout.Classify(p); c.Kind {
	case layout.KindBlobData:
		bp.isData = true
	case layout.KindReverseLink:
		bp.reverse, bp.repo, bp.kind = true, c.Repo, string(c.LinkKind)
	}
	return bp, true
}
