package trash

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/internal/pause"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/reclaim/trashentry"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/referrers"
)

// Selector picks what to restore: a repository's tag or digest, a GC
// run, or a retention plan. Exactly one of (Repo with Tag or Digest),
// Run and Plan.
type Selector struct {
	Repo   string
	Tag    string
	Digest digest.Digest
	Run    string
	Plan   string
}

// Validate says what is wrong with s, in words for an API caller.
func (s Selector) Validate() error {
	n := 0
	if s.Repo != "" {
		n++
		if !layout.ValidRepo(s.Repo) {
			return fmt.Errorf("repository %q is not a valid repository name", s.Repo)
		}
		if (s.Tag == "") == (s.Digest == "") {
			return errors.New("a repository needs exactly one of tag or digest")
		}
		if s.Digest != "" && !layout.ValidDigest(s.Digest) {
			return fmt.Errorf("digest %q is not a valid sha256 digest", s.Digest)
		}
	}
	if s.Run != "" {
		n++
	}
	if s.Plan != "" {
		n++
	}
	if n != 1 {
		return errors.New("give exactly one of repository (with tag or digest), run or plan")
	}
	return nil
}

// RestoredEntry is what a restore did with one entry.
type RestoredEntry struct {
	Entry   trashentry.Entry   `json:"entry"`
	Outcome trashentry.Outcome `json:"outcome"`
	Detail  string             `json:"detail,omitempty"`
}

// RestoreReport is one restore.
type RestoreReport struct {
	Entries []RestoredEntry `json:"entries"`
	// Restored counts entries put back (restored or already there);
	// Left the others, which stay in the trash.
	Restored int `json:"restored"`
	Left     int `json:"left"`
	// AlsoRestored are entries the selection did not name whose objects
	// came back with it (a manifest's layer links, an index's children):
	// their holds are dropped too.
	AlsoRestored []trashentry.Entry `json:"also_restored,omitempty"`
}

// tagLease bounds how long a restore that died holds a tag's fence.
const tagLease = time.Minute

// Restore puts back what s selects, in the order a push writes: layer
// links, then manifests (an index's children first, a manifest's layers
// and config first), then tags. Every link goes through the middleware's
// driver like a push's, so a collect that fenced one of them first makes
// the restore wait or fail (and retry), and one that fences after sees it
// accessed. A tag is written under its fence, only where it is absent:
// one a client re-pointed meanwhile is left alone (trashentry.TagMoved).
func (b *Bin) Restore(ctx context.Context, s Selector) (RestoreReport, error) {
	if err := s.Validate(); err != nil {
		return RestoreReport{}, err
	}
	entries, err := b.selected(ctx, s)
	if err != nil {
		return RestoreReport{}, err
	}
	order := map[reclaim.ObjectKind]int{reclaim.KindLayerLink: 0, reclaim.KindManifest: 1, reclaim.KindTag: 2, reclaim.KindBlob: 3}
	slices.SortStableFunc(entries, func(a, b trashentry.Entry) int { return order[a.Kind] - order[b.Kind] })
	r := &restorer{b: b, done: map[restoreKey]result{}, selected: map[string]bool{}}
	for _, e := range entries {
		r.selected[e.ID] = true
	}
	rep := RestoreReport{Entries: []RestoredEntry{}}
	for _, e := range entries {
		res := r.entry(ctx, e)
		if res.outcome.Back() {
			if err := b.Drop(ctx, e); err != nil {
				res.detail = joinDetail(res.detail, "put back, but its hold is left: "+err.Error())
			}
			rep.Restored++
		} else {
			rep.Left++
		}
		rep.Entries = append(rep.Entries, RestoredEntry{Entry: e, Outcome: res.outcome, Detail: res.detail})
	}
	rep.AlsoRestored = r.also
	return rep, nil
}

// selected lists the entries s picks: from the index, and for a digest
// also from the holds in storage (the truth, when the index lost some).
func (b *Bin) selected(ctx context.Context, s Selector) ([]trashentry.Entry, error) {
	f := Filter{Repo: s.Repo, Run: s.Run, Plan: s.Plan, Tag: s.Tag}
	if s.Digest != "" {
		f.Digest = s.Digest
	}
	entries, err := b.List(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("trash: list entries: %w", err)
	}
	if s.Tag != "" {
		entries = onlyKind(entries, reclaim.KindTag)
		if len(entries) > 1 {
			entries = entries[:1] // the newest: what the tag pointed at last
		}
	}
	if s.Digest == "" {
		return entries, nil
	}
	stored, err := b.Holds(ctx, s.Digest)
	if err != nil {
		return nil, fmt.Errorf("trash: read holds of %s: %w", s.Digest, err)
	}
	for _, e := range stored {
		if e.Repo == s.Repo && e.Kind != reclaim.KindTag && !slices.ContainsFunc(entries, func(x trashentry.Entry) bool { return x.ID == e.ID }) {
			entries = append(entries, e)
		}
	}
	return slices.DeleteFunc(entries, func(e trashentry.Entry) bool { return e.Kind == reclaim.KindTag }), nil
}

func onlyKind(es []trashentry.Entry, k reclaim.ObjectKind) []trashentry.Entry {
	return slices.DeleteFunc(es, func(e trashentry.Entry) bool { return e.Kind != k })
}

func joinDetail(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

type restoreKey struct {
	kind reclaim.ObjectKind
	repo string
	d    digest.Digest
}

type result struct {
	outcome trashentry.Outcome
	detail  string
}

// restorer restores the objects of one Restore, each once.
type restorer struct {
	b        *Bin
	done     map[restoreKey]result
	selected map[string]bool    // the ids the selection named
	also     []trashentry.Entry // entries dropped beside them
}

func (r *restorer) entry(ctx context.Context, e trashentry.Entry) result {
	switch e.Kind {
	case reclaim.KindLayerLink:
		return r.layer(ctx, e.Repo, e.Digest, false)
	case reclaim.KindManifest:
		return r.manifest(ctx, e.Repo, e.Digest)
	case reclaim.KindTag:
		return r.tag(ctx, e)
	}
	return result{trashentry.NotLinkable, "no repository linked this blob when it was removed"}
}

// layer puts back repo's layer link to d (optional: a foreign layer whose
// data was never stored).
func (r *restorer) layer(ctx context.Context, repo string, d digest.Digest, optional bool) result {
	k := restoreKey{reclaim.KindLayerLink, repo, d}
	if res, ok := r.done[k]; ok {
		return res
	}
	res := r.link(ctx, layout.LayerLinkPath(repo, d), d, optional)
	if res.outcome == trashentry.Restored {
		r.dropHolds(ctx, k)
	}
	r.done[k] = res
	return res
}

// manifest puts back repo's manifest m: its layers and config, then (an
// index) its children, then its revision link and its referrers index
// entry.
func (r *restorer) manifest(ctx context.Context, repo string, m digest.Digest) result {
	k := restoreKey{reclaim.KindManifest, repo, m}
	if res, ok := r.done[k]; ok {
		return res
	}
	r.done[k] = result{trashentry.Failed, "a manifest that references itself"}
	res := r.manifestOnce(ctx, repo, m)
	if res.outcome == trashentry.Restored {
		r.dropHolds(ctx, k)
	}
	r.done[k] = res
	return res
}

func (r *restorer) manifestOnce(ctx context.Context, repo string, m digest.Digest) result {
	payload, err := r.b.cfg.Raw.GetContent(ctx, layout.BlobDataPath(m))
	if layout.IsNotFound(err) {
		return result{trashentry.Purged, "the manifest's data is gone"}
	}
	if err != nil {
		return result{trashentry.Failed, "read manifest: " + err.Error()}
	}
	refs, err := referencesOf(payload)
	if err != nil {
		return result{trashentry.Failed, fmt.Sprintf("manifest %s: %v", m, err)}
	}
	for _, l := range refs.blobs {
		if res := r.layer(ctx, repo, l.Digest, len(l.URLs) > 0); res.outcome != trashentry.Restored {
			return result{res.outcome, fmt.Sprintf("blob %s: %s", l.Digest, res.detail)}
		}
	}
	for _, c := range refs.manifests {
		if res := r.manifest(ctx, repo, c); res.outcome != trashentry.Restored {
			return result{res.outcome, fmt.Sprintf("child manifest %s: %s", c, res.detail)}
		}
	}
	if res := r.refsStillLinked(ctx, repo, refs); res.outcome != trashentry.Restored {
		return res
	}
	if res := r.link(ctx, layout.RevisionLinkPath(repo, m), m, false); res.outcome != trashentry.Restored {
		return res
	}
	// The entry follows the link (from the link just written) rather than
	// being added: a DELETE of m that ran since the link was written has
	// already made its own entry follow the link, and an Add after it
	// would list a manifest that is gone.
	if subject, desc, ok, err := referrers.Of(payload, m, ""); err == nil && ok {
		if _, err := referrers.New(r.b.cfg.Raw).FollowFrom(ctx, repo, subject, desc, true); err != nil {
			return result{trashentry.Failed, "referrers index entry: " + err.Error()}
		}
	}
	return result{trashentry.Restored, ""}
}

// refsStillLinked looks again, right before m's revision link, at the
// links of what m references, and puts back any that is gone. Each was
// protected for a window from its write (or its check), and nothing
// referenced it until the revision link: a restore slower than that (a
// large run, a slow store) may have met a collect that removed it
// meanwhile, and would answer restored for an image that 404s. The look
// goes through the middleware, so it is a fence-checked touch that
// protects it for a window from now, as a manifest PUT re-checks its
// references before its revision link (docs/gc-protocol.md, case 11).
func (r *restorer) refsStillLinked(ctx context.Context, repo string, refs refs) result {
	// look puts k back with put when its link at p is gone
	look := func(k restoreKey, p string, put func() result) result {
		_, err := r.b.cfg.Driver.Stat(ctx, p)
		switch {
		case err == nil:
			return result{trashentry.Restored, ""}
		case !layout.IsNotFound(err):
			return result{trashentry.Failed, fmt.Sprintf("look at %s again: %v", k.d, err)}
		}
		res := put()
		if res.outcome == trashentry.Restored {
			r.dropHolds(ctx, k) // the collect's: what it removed is back
		}
		return res
	}
	for _, l := range refs.blobs {
		p := layout.LayerLinkPath(repo, l.Digest)
		put := func() result { return r.link(ctx, p, l.Digest, len(l.URLs) > 0) }
		if res := look(restoreKey{reclaim.KindLayerLink, repo, l.Digest}, p, put); res.outcome != trashentry.Restored {
			return result{res.outcome, fmt.Sprintf("blob %s, looked at again: %s", l.Digest, res.detail)}
		}
	}
	for _, c := range refs.manifests {
		// a child removed meanwhile may have lost its own references too
		put := func() result { return r.manifestOnce(ctx, repo, c) }
		if res := look(restoreKey{reclaim.KindManifest, repo, c}, layout.RevisionLinkPath(repo, c), put); res.outcome != trashentry.Restored {
			return result{res.outcome, fmt.Sprintf("child manifest %s, looked at again: %s", c, res.detail)}
		}
	}
	return result{trashentry.Restored, ""}
}

// link writes a forward link through the middleware, as a push does: the
// reverse link first, the fence check, the access record; the data must
// be there. A refusal because a GC holds the object's fence is retried.
func (r *restorer) link(ctx context.Context, p string, d digest.Digest, optional bool) result {
	if _, err := r.b.cfg.Raw.Stat(ctx, layout.BlobDataPath(d)); layout.IsNotFound(err) {
		if optional {
			return result{trashentry.Restored, "foreign layer: no data stored"}
		}
		return result{trashentry.Purged, "its data is gone"}
	}
	var err error
	for attempt := range 5 {
		if err = r.b.cfg.Driver.PutContent(ctx, p, []byte(d.String())); err == nil || r.b.cfg.Retryable == nil || !r.b.cfg.Retryable(err) {
			break
		}
		// A purge that held the blob's fence deleted the data after the
		// look above: the write was refused, and every retry would be.
		if _, serr := r.b.cfg.Raw.Stat(ctx, layout.BlobDataPath(d)); layout.IsNotFound(serr) {
			return result{trashentry.Purged, "its data is gone"}
		}
		if err := pause.For(ctx, time.Duration(attempt+1)*200*time.Millisecond); err != nil {
			return result{trashentry.Failed, err.Error()}
		}
	}
	switch {
	case layout.IsNotFound(err):
		return result{trashentry.Purged, "its data is gone"}
	case err != nil:
		return result{trashentry.Failed, err.Error()}
	}
	return result{trashentry.Restored, ""}
}

// tag puts back e's tag where it is absent, under the tag's fence: a push
// of the tag meanwhile either wrote first (and the restore leaves it,
// trashentry.TagMoved) or waits for the fence and then finds its own write gone and
// answers 503 (middleware's tagWritten), never 201 for a lost write.
func (r *restorer) tag(ctx context.Context, e trashentry.Entry) result {
	if res := r.manifest(ctx, e.Repo, e.Digest); res.outcome != trashentry.Restored {
		return result{res.outcome, "its manifest: " + res.detail}
	}
	tr := r.b.cfg.Tracker
	f, err := tr.FenceTag(ctx, e.Repo, e.Tag, tagLease)
	if err != nil {
		return result{trashentry.Failed, "fence tag: " + err.Error()}
	}
	defer func() { _ = tr.Release(context.WithoutCancel(ctx), f) }()
	cur, err := r.b.cfg.Raw.GetContent(ctx, layout.TagCurrentPath(e.Repo, e.Tag))
	switch {
	case err == nil && string(cur) == e.Digest.String():
		return result{trashentry.AlreadyThere, ""}
	case err == nil:
		return result{trashentry.TagMoved, "the tag points at " + string(cur) + " now: left alone"}
	case !layout.IsNotFound(err):
		return result{trashentry.Failed, "read tag: " + err.Error()}
	}
	// as Distribution's tag store writes a tag: its index entry, then current
	link := []byte(e.Digest.String())
	if err := r.b.cfg.Raw.PutContent(ctx, layout.TagIndexPath(e.Repo, e.Tag, e.Digest), link); err != nil {
		return result{trashentry.Failed, "write tag index: " + err.Error()}
	}
	if err := tr.Confirm(ctx, f, tagLease); err != nil {
		return result{trashentry.Failed, err.Error()}
	}
	if err := r.b.cfg.Raw.PutContent(ctx, layout.TagCurrentPath(e.Repo, e.Tag), link); err != nil {
		return result{trashentry.Failed, "write tag: " + err.Error()}
	}
	return result{trashentry.Restored, ""}
}

// dropHolds drops every hold of the kind and repository k names on its
// blob: the object is back, so every entry that removed it is done.
func (r *restorer) dropHolds(ctx context.Context, k restoreKey) {
	holds, err := r.b.Holds(ctx, k.d)
	if err != nil {
		return // the holds stay: they keep data longer, nothing more
	}
	for _, h := range holds {
		if h.Kind == k.kind && h.Repo == k.repo && r.b.Drop(ctx, h) == nil && !r.selected[h.ID] {
			r.also = append(r.also, h)
		}
	}
}

// refs is what a manifest references: blobs (layers, config) and, in an
// index, child manifests.
type refs struct {
	blobs     []descriptor
	manifests []digest.Digest
}

type descriptor struct {
	Digest digest.Digest `json:"digest"`
	URLs   []string      `json:"urls"`
}

// referencesOf parses the references of an OCI or Docker manifest or
// index (schema 2); a schema 1 manifest lists its layers as fsLayers.
func referencesOf(payload []byte) (refs, error) {
	var m struct {
		Config    *descriptor  `json:"config"`
		Layers    []descriptor `json:"layers"`
		Blobs     []descriptor `json:"blobs"`
		Manifests []descriptor `json:"manifests"`
		FSLayers  []struct {
			BlobSum digest.Digest `json:"blobSum"`
		} `json:"fsLayers"`
	}
	if err := json.Unmarshal(payload, &m); err != nil {
		return refs{}, fmt.Errorf("unparsable manifest: %w", err)
	}
	var out refs
	if m.Config != nil {
		out.blobs = append(out.blobs, *m.Config)
	}
	out.blobs = append(out.blobs, m.Layers...)
	out.blobs = append(out.blobs, m.Blobs...)
	for _, l := range m.FSLayers {
		out.blobs = append(out.blobs, descriptor{Digest: l.BlobSum})
	}
	for _, c := range m.Manifests {
		out.manifests = append(out.manifests, c.Digest)
	}
	for _, d := range out.blobs {
		if !layout.ValidDigest(d.Digest) {
			return refs{}, fmt.Errorf("references %q, not a sha256 digest", d.Digest)
		}
	}
	for _, d := range out.manifests {
		if !layout.ValidDigest(d) {
			return refs{}, fmt.Errorf("references %q, not a sha256 digest", d)
		}
	}
	return out, nil
}
