package gc

import (
	"github.com/opencontainers/go-digest"
)

// Distribution's storage layout, the part the collector reads and deletes.
// The storage package draws the whole tree; these mirror it.
const (
	rootPath  = "/docker/registry/v2"
	reposRoot = rootPath + "/repositories"
)

func repoPath(repo string) string      { return reposRoot + "/" + repo }
func manifestsPath(repo string) string { return repoPath(repo) + "/_manifests" }
func layersPath(repo string) string    { return repoPath(repo) + "/_layers" }
func tagsPath(repo string) string      { return manifestsPath(repo) + "/tags" }

func blobDir(d digest.Digest) string {
	return rootPath + "/blobs/" + d.Algorithm().String() + "/" + d.Encoded()[:2] + "/" + d.Encoded()
}

func blobDataPath(d digest.Digest) string { return blobDir(d) + "/data" }

func revisionDir(repo string, d digest.Digest) string {
	return manifestsPath(repo) + "/revisions/" + d.Algorithm().String() + "/" + d.Encoded()
}

func layerLinkDir(repo string, d digest.Digest) string {
	return layersPath(repo) + "/" + d.Algorithm().String() + "/" + d.Encoded()
}

func tagCurrentPath(repo, tag string) string { return tagsPath(repo) + "/" + tag + "/current/link" }

func tagIndexDir(repo, tag string, d digest.Digest) string {
	return tagsPath(repo) + "/" + tag + "/index/" + d.Algorithm().String() + "/" + d.Encoded()
}

func referrerDir(repo string, subject, referrer digest.Digest) string {
	return manifestsPath(repo) + "/referrers/" + subject.Algorithm().String() + "/" + subject.Encoded() +
		"/" + referrer.Algorithm().String() + "/" + referrer.Encoded()
}
