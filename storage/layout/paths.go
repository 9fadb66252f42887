package layout

import (
	"path"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/distribution/reference"
	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/reclaim"
)

// The storage tree, as Distribution lays it out, plus what Reclaim adds (+):
//
//	/docker/registry/v2
//	├── blobs/<alg>/<hex[:2]>/<hex>/
//	│   ├── data                                          PathBlobData
//	│   └── _repositories/<name>/                       + reverse links
//	│       ├── _layers/link                            + PathReverseLink: <name> has a layer link to the blob
//	│       └── _manifests/link                         + PathReverseLink: <name> has a manifest revision of it
//	├── repositories/<name>/                              PathRepositoryDir (also _layers, _manifests, revisions)
//	│   ├── _layers/<alg>/<hex>/link                      PathLayerLink   (dir: PathLayerLinkDir)
//	│   ├── _manifests/revisions/<alg>/<hex>/link         PathRevisionLink (dir: PathRevisionLinkDir)
//	│   ├── _manifests/tags/<tag>/current/link            PathTagCurrent
//	│   ├── _manifests/tags/<tag>/index/<alg>/<hex>/link  PathTagIndex
//	│   ├── _manifests/tags/<tag>/...                     PathTagDir
//	│   ├── _manifests/referrers/<alg>/<hex>/<alg>/<hex>/link
//	│   │                                               + PathReferrerLink (subject, then referrer)
//	│   └── _uploads/<id>/...                             PathUpload
//	└── (reclaim/ at the driver root)                   + linkdb marker and rebuild checkpoint
//
// Every file Reclaim adds under blobs/ is named "link", so Distribution's
// blob enumeration (which only looks at files named "data") never sees one,
// and everything we add under repositories/ lives below a component that
// starts with "_", which the catalog walk skips. Repository name components
// never start with "_" (reference grammar), so "_repositories", "_layers" and
// "_manifests" cannot collide with a name.

// RootPath is the prefix of every path Distribution gives its driver.
const RootPath = "/docker/registry/v2"

// BlobsRoot holds every blob; RepositoriesRoot every repository.
const (
	BlobsRoot        = RootPath + "/blobs"
	RepositoriesRoot = RootPath + "/repositories"
)

// PathKind is what a storage path is, as far as the link database cares.
type PathKind int

// The kinds of path. The *Dir kinds are directories Distribution deletes
// whole (a revision, a layer link, a repository).
const (
	PathOther PathKind = iota
	PathBlobData
	PathBlobDir
	PathReverseLink
	PathLayerLink
	PathLayerLinkDir
	PathRevisionLink
	PathRevisionLinkDir
	PathTagCurrent
	PathTagIndex
	PathTagDir
	PathReferrerLink
	PathUpload
	// PathRepositoryDir is a directory that may hold forward links of one
	// or more repositories: repositories/<name>, <name>/_layers,
	// <name>/_manifests, <name>/_manifests/revisions.
	PathRepositoryDir
	// PathTrashHold is a trash entry's hold on a blob (Hold is its id):
	// blobs/.../_repositories/_trash/<id>/link. It keeps the blob's data
	// like a reverse link; it has no forward link.
	PathTrashHold
)

var kindNames = [...]string{
	PathOther:           "other",
	PathBlobData:        "blob-data",
	PathBlobDir:         "blob-dir",
	PathReverseLink:     "reverse-link",
	PathLayerLink:       "layer-link",
	PathLayerLinkDir:    "layer-link-dir",
	PathRevisionLink:    "revision-link",
	PathRevisionLinkDir: "revision-link-dir",
	PathTagCurrent:      "tag-current",
	PathTagIndex:        "tag-index",
	PathTagDir:          "tag-dir",
	PathReferrerLink:    "referrer-link",
	PathUpload:          "upload",
	PathRepositoryDir:   "repository-dir",
	PathTrashHold:       "trash-hold",
}

func (k PathKind) String() string {
	if k >= 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "unknown"
}

// Path is a classified storage path. Fields that do not apply to Kind are
// zero. For PathReferrerLink, Digest is the subject and Referrer the
// referrer. For PathRepositoryDir, Sub is the part below the repository
// ("", "_layers", "_manifests" or "_manifests/revisions").
type Path struct {
	Kind     PathKind
	Repo     string
	Digest   digest.Digest
	Referrer digest.Digest
	Tag      string
	LinkKind reclaim.LinkKind
	Sub      string
	Hold     string // a PathTrashHold's entry id
}

// LinkSet returns the forward link set a (forward or reverse) link path belongs to.
func (p Path) LinkSet() reclaim.LinkKind {
	switch p.Kind {
	case PathLayerLink, PathLayerLinkDir:
		return reclaim.LinkLayer
	case PathRevisionLink, PathRevisionLinkDir:
		return reclaim.LinkManifest
	case PathReverseLink:
		return p.LinkKind
	}
	return ""
}

// String rebuilds the storage path. For every path Classify recognises
// (Kind != PathOther, PathUpload, PathTagDir), Classify(p).String() == p.
func (p Path) String() string {
	switch p.Kind {
	case PathBlobData:
		return BlobDataPath(p.Digest)
	case PathBlobDir:
		return BlobDir(p.Digest)
	case PathReverseLink:
		return ReverseLinkPath(p.Digest, p.Repo, p.LinkKind)
	case PathLayerLink:
		return LayerLinkPath(p.Repo, p.Digest)
	case PathLayerLinkDir:
		return LayerLinkDir(p.Repo, p.Digest)
	case PathRevisionLink:
		return RevisionLinkPath(p.Repo, p.Digest)
	case PathRevisionLinkDir:
		return RevisionDir(p.Repo, p.Digest)
	case PathTagCurrent:
		return TagCurrentPath(p.Repo, p.Tag)
	case PathTagIndex:
		return TagIndexPath(p.Repo, p.Tag, p.Digest)
	case PathReferrerLink:
		return ReferrerLinkPath(p.Repo, p.Digest, p.Referrer)
	case PathRepositoryDir:
		return path.Join(RepositoryPath(p.Repo), p.Sub)
	case PathTrashHold:
		return TrashHoldPath(p.Digest, p.Hold)
	}
	return ""
}

func digestDir(d digest.Digest) string {
	return d.Algorithm().String() + "/" + d.Encoded()
}

// BlobDir is the directory of blob d: its data and its reverse links.
func BlobDir(d digest.Digest) string {
	enc := d.Encoded()
	if len(enc) < 2 {
		return BlobsRoot + "/" + d.Algorithm().String() + "/" + enc + "/" + enc
	}
	return BlobsRoot + "/" + d.Algorithm().String() + "/" + enc[:2] + "/" + enc
}

// BlobDataPath is where the content of blob d lives.
func BlobDataPath(d digest.Digest) string { return BlobDir(d) + "/data" }

// ReverseLinksDir holds every reverse link of blob d.
func ReverseLinksDir(d digest.Digest) string { return BlobDir(d) + "/_repositories" }

// TrashDir holds the trash holds of blob d. "_trash" cannot be a
// repository name (no path component of one starts with "_"), so no walk
// of reverse links mistakes it for one.
func TrashDir(d digest.Digest) string { return ReverseLinksDir(d) + "/" + string(reclaim.LinkTrash) }

// TrashHoldPath is the hold of trash entry id on blob d.
func TrashHoldPath(d digest.Digest, id string) string { return TrashDir(d) + "/" + id + "/link" }

// ValidTrashID reports whether id is a trash entry id:
// "<unix milliseconds>-<8 hex digits>".
func ValidTrashID(id string) bool {
	ms, rnd, ok := strings.Cut(id, "-")
	if !ok || len(ms) == 0 || len(ms) > 16 || len(rnd) != 8 {
		return false
	}
	for _, c := range ms {
		if c < '0' || c > '9' {
			return false
		}
	}
	for _, c := range rnd {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// ReverseLinkPath is the reverse link "repo has a k link to blob d".
func ReverseLinkPath(d digest.Digest, repo string, k reclaim.LinkKind) string {
	return ReverseLinksDir(d) + "/" + repo + "/" + string(k) + "/link"
}

// RepositoryPath is the directory of repository repo.
func RepositoryPath(repo string) string { return RepositoriesRoot + "/" + repo }

// ManifestsDir holds repo's revisions, tags and referrers index.
func ManifestsDir(repo string) string { return RepositoryPath(repo) + "/_manifests" }

// LayersDir holds every layer link of repo.
func LayersDir(repo string) string { return RepositoryPath(repo) + "/_layers" }

// RevisionsDir holds every manifest revision link of repo.
func RevisionsDir(repo string) string { return RepositoryPath(repo) + "/_manifests/revisions" }

// TagsDir holds every tag of repo.
func TagsDir(repo string) string { return RepositoryPath(repo) + "/_manifests/tags" }

// ReferrersIndexDir holds repo's referrers index, by subject.
func ReferrersIndexDir(repo string) string { return RepositoryPath(repo) + "/_manifests/referrers" }

// LayerLinkPath is repo's layer link to blob d.
func LayerLinkPath(repo string, d digest.Digest) string {
	return LayersDir(repo) + "/" + digestDir(d) + "/link"
}

// LayerLinkDir is the directory of repo's layer link to blob d, which
// Distribution deletes whole.
func LayerLinkDir(repo string, d digest.Digest) string { return path.Dir(LayerLinkPath(repo, d)) }

// RevisionLinkPath is repo's manifest revision link to manifest d.
func RevisionLinkPath(repo string, d digest.Digest) string {
	return RevisionsDir(repo) + "/" + digestDir(d) + "/link"
}

// RevisionDir is the directory of repo's revision link to manifest d,
// which Distribution deletes whole.
func RevisionDir(repo string, d digest.Digest) string { return path.Dir(RevisionLinkPath(repo, d)) }

// ForwardLinkPath is the forward link that reverse link (d, repo, k) mirrors.
func ForwardLinkPath(repo string, d digest.Digest, k reclaim.LinkKind) string {
	if k == reclaim.LinkManifest {
		return RevisionLinkPath(repo, d)
	}
	return LayerLinkPath(repo, d)
}

// TagCurrentPath is the link to the manifest tag points at.
func TagCurrentPath(repo, tag string) string {
	return TagsDir(repo) + "/" + tag + "/current/link"
}

// TagIndexPath records that tag once pointed at manifest d.
func TagIndexPath(repo, tag string, d digest.Digest) string {
	return TagsDir(repo) + "/" + tag + "/index/" + digestDir(d) + "/link"
}

// ReferrersDir holds the referrers of subject in repo.
func ReferrersDir(repo string, subject digest.Digest) string {
	return ReferrersIndexDir(repo) + "/" + digestDir(subject)
}

// ReferrerLinkPath records that manifest referrer has subject as its subject.
func ReferrerLinkPath(repo string, subject, referrer digest.Digest) string {
	return ReferrersDir(repo, subject) + "/" + digestDir(referrer) + "/link"
}

// Classify says what a raw storage path is. It is pure and total: anything
// it does not recognise exactly (including malformed digests or repository
// names) is PathOther, so callers that act on a kind never act on a guess.
func Classify(p string) Path {
	switch {
	case strings.HasPrefix(p, BlobsRoot+"/"):
		return classifyBlob(strings.Split(p[len(BlobsRoot)+1:], "/"))
	case strings.HasPrefix(p, RepositoriesRoot+"/"):
		return classifyRepo(strings.Split(p[len(RepositoriesRoot)+1:], "/"))
	}
	return Path{}
}

// parseDigest accepts alg/hex only in canonical, validated form.
func parseDigest(alg, enc string) (digest.Digest, bool) {
	if alg == string(digest.SHA256) {
		// every path Distribution names: no regexp (go-digest's Validate
		// runs one per call, on every driver call of a pull)
		if !isSHA256Hex(enc) {
			return "", false
		}
		return digest.Digest(alg + ":" + enc), true
	}
	d := digest.NewDigestFromEncoded(digest.Algorithm(alg), enc)
	if d.Validate() != nil || d.Encoded() != enc || d.Algorithm().String() != alg {
		return "", false
	}
	return d, true
}

// ValidDigest reports whether d is a valid digest, as d.Validate() == nil,
// without a regexp for sha256.
func ValidDigest(d digest.Digest) bool {
	if enc, ok := strings.CutPrefix(string(d), string(digest.SHA256)+":"); ok {
		return isSHA256Hex(enc)
	}
	return d.Validate() == nil
}

// isSHA256Hex reports whether s is what go-digest accepts as the encoded
// part of a sha256 digest: 64 lowercase hex characters.
func isSHA256Hex(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// ValidRepo reports whether name is a repository name in canonical form.
// Valid names are remembered (about validRepoCacheMax, then forgotten all
// at once): the reference grammar is a regexp, and every driver call on a
// repository's path asks. Invalid names are not remembered, so input that
// is refused anyway cannot fill the cache.
func ValidRepo(name string) bool {
	if name == "" {
		return false
	}
	if _, ok := validRepos.Load(name); ok {
		return true
	}
	n, err := reference.WithName(name)
	if err != nil || n.Name() != name {
		return false
	}
	if validReposLen.Add(1) > validRepoCacheMax {
		validRepos.Clear()
		validReposLen.Store(1)
	}
	validRepos.Store(name, struct{}{})
	return true
}

const validRepoCacheMax = 4096

var (
	validRepos    sync.Map // name -> struct{}: names ValidRepo accepted
	validReposLen atomic.Int64
)

// classifyBlob handles <alg>/<hex[:2]>/<hex>/...
func classifyBlob(c []string) Path {
	if len(c) < 3 {
		return Path{}
	}
	d, ok := parseDigest(c[0], c[2])
	if !ok || len(c[2]) < 2 || c[1] != c[2][:2] {
		return Path{}
	}
	rest := c[3:]
	switch {
	case len(rest) == 0:
		return Path{Kind: PathBlobDir, Digest: d}
	case len(rest) == 1 && rest[0] == "data":
		return Path{Kind: PathBlobData, Digest: d}
	case len(rest) == 4 && rest[0] == "_repositories" && rest[1] == string(reclaim.LinkTrash) && rest[3] == "link":
		if !ValidTrashID(rest[2]) {
			return Path{}
		}
		return Path{Kind: PathTrashHold, Digest: d, Hold: rest[2]}
	case len(rest) >= 4 && rest[0] == "_repositories" && rest[len(rest)-1] == "link":
		k := reclaim.LinkKind(rest[len(rest)-2])
		repo := strings.Join(rest[1:len(rest)-2], "/")
		if (k != reclaim.LinkLayer && k != reclaim.LinkManifest) || !ValidRepo(repo) {
			return Path{}
		}
		return Path{Kind: PathReverseLink, Digest: d, Repo: repo, LinkKind: k}
	}
	return Path{}
}

// classifyRepo handles <name...>/_<section>/...
func classifyRepo(c []string) Path {
	i := 0
	for i < len(c) && !strings.HasPrefix(c[i], "_") {
		i++
	}
	repo := strings.Join(c[:i], "/")
	if !ValidRepo(repo) {
		return Path{}
	}
	rest := c[i:]
	if len(rest) == 0 {
		return Path{Kind: PathRepositoryDir, Repo: repo}
	}
	switch rest[0] {
	case "_uploads":
		return Path{Kind: PathUpload, Repo: repo}
	case "_layers":
		return classifyDigestLink(repo, rest[1:], PathLayerLink, PathLayerLinkDir, "_layers")
	case "_manifests":
		if len(rest) == 1 {
			return Path{Kind: PathRepositoryDir, Repo: repo, Sub: "_manifests"}
		}
		switch rest[1] {
		case "revisions":
			return classifyDigestLink(repo, rest[2:], PathRevisionLink, PathRevisionLinkDir, "_manifests/revisions")
		case "tags":
			return classifyTag(repo, rest[2:])
		case "referrers":
			return classifyReferrer(repo, rest[2:])
		}
	}
	return Path{}
}

// classifyDigestLink handles [<alg>/<hex>[/link]] below _layers or revisions.
func classifyDigestLink(repo string, c []string, file, dir PathKind, sub string) Path {
	switch len(c) {
	case 0:
		return Path{Kind: PathRepositoryDir, Repo: repo, Sub: sub}
	case 2, 3:
		d, ok := parseDigest(c[0], c[1])
		if !ok {
			return Path{}
		}
		if len(c) == 2 {
			return Path{Kind: dir, Repo: repo, Digest: d}
		}
		if c[2] == "link" {
			return Path{Kind: file, Repo: repo, Digest: d}
		}
	}
	return Path{}
}

func classifyTag(repo string, c []string) Path {
	if len(c) == 0 {
		return Path{Kind: PathTagDir, Repo: repo}
	}
	tag := c[0]
	switch {
	case len(c) == 3 && c[1] == "current" && c[2] == "link":
		return Path{Kind: PathTagCurrent, Repo: repo, Tag: tag}
	case len(c) == 5 && c[1] == "index" && c[4] == "link":
		if d, ok := parseDigest(c[2], c[3]); ok {
			return Path{Kind: PathTagIndex, Repo: repo, Tag: tag, Digest: d}
		}
	}
	return Path{Kind: PathTagDir, Repo: repo, Tag: tag}
}

func classifyReferrer(repo string, c []string) Path {
	if len(c) != 5 || c[4] != "link" {
		return Path{}
	}
	s, ok1 := parseDigest(c[0], c[1])
	r, ok2 := parseDigest(c[2], c[3])
	if !ok1 || !ok2 {
		return Path{}
	}
	return Path{Kind: PathReferrerLink, Repo: repo, Digest: s, Referrer: r}
}
