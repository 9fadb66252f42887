package reclaim

import (
	"fmt"
	"time"

	"github.com/opencontainers/go-digest"
)

// LinkKind is which forward link set a link belongs to (and a reverse
// link mirrors). Its strings are the directory names of the storage tree.
type LinkKind string

// The two forward link sets that keep a blob alive, and the trash's hold,
// which keeps a blob's data (not its place in /v2/) while a removed object
// can be restored.
const (
	LinkLayer    LinkKind = "_layers"
	LinkManifest LinkKind = "_manifests"
	LinkTrash    LinkKind = "_trash"
)

// Object is what the access tracker records and GC fences and deletes: a
// blob (Repo == "") or repository Repo's link of kind Kind to it.
type Object struct {
	Blob digest.Digest
	Repo string
	Kind LinkKind
}

func (o Object) String() string {
	if o.Repo == "" {
		return o.Blob.String()
	}
	return fmt.Sprintf("%s %s %s", o.Repo, o.Kind, o.Blob)
}

// RepoLink is one reverse link: repository Repo links the blob as a layer
// (LinkLayer) or as a manifest revision (LinkManifest); or a trash hold
// (Kind LinkTrash, Repo empty, Hold its entry id).
type RepoLink struct {
	Repo string
	Kind LinkKind
	Hold string // the trash entry id of a LinkTrash link
	// Problem is set when what sits at the link path is not a link file (a
	// directory, an entry the listing shows but Stat cannot see). Such a
	// link still counts as present: callers keep the blob and report it.
	Problem string
}

// ObjectKind is what kind of object a decision is about.
type ObjectKind string

// The three kinds of object a run looks at, the run itself, and the tag
// retention deletes.
const (
	KindManifest  ObjectKind = "manifest"   // a manifest revision link of the repository
	KindLayerLink ObjectKind = "layer_link" // a layer link of the repository
	KindBlob      ObjectKind = "blob"       // a blob in the global store
	KindRun       ObjectKind = "run"        // the run itself (errors only)
	KindTag       ObjectKind = "tag"        // a tag of the repository (retention; deletion events only)
)

// ReviewItem is one blob a reclaimer claimed from the review queue and
// holds until its lease runs out.
type ReviewItem struct {
	Blob digest.Digest
	// Due is when the item was due (before the claim).
	Due time.Time
	// Lease is the queue's token for the claim: Done and Requeue compare
	// against it, so a claim that ran out cannot touch a newer one.
	Lease int64
}
