package soak

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// violation records a broken invariant with what storage shows.
func (w *workload) violation(kind, format string, args ...any) {
	w.fails.add(fmt.Sprintf("%s VIOLATION: %s [%s]", kind, fmt.Sprintf(format, args...), time.Now().Format("15:04:05.000")), 1)
}

// pullableWithin reports whether repo@d pulls, every blob verified, within
// wait: a manifest refused while a GC step held its fence (and then kept
// it) pulls again once the fence is given back; a lost one never does.
func pullableWithin(ctx context.Context, r *registrytest.Registry, repo string, d v1.Hash, wait time.Duration) bool {
	return poll(ctx, 250*time.Millisecond, wait, func() bool {
		_, err := pullVerify(ctx, r, repo, "@"+d.String())
		return err == nil
	})
}

// judgeAck pulls a manifest the registry just acknowledged with 201, by
// digest, through the instance that did not acknowledge it, and reads every
// blob with its digest checked. "Manifest found, a blob missing" is always a
// violation; "manifest unknown" is one unless the workload issued a DELETE of
// that manifest (userDeleted), which may have run concurrently with the PUT.
// put is when the push's first manifest PUT started: what the registry
// verified then is protected for W, so a pull that ends later than that
// proves nothing (counted, not judged).
func (w *workload) judgeAck(ctx context.Context, kind, repo string, d v1.Hash, acked *registrytest.Registry, put time.Time) {
	r := w.c.other(acked)
	var err error
	class := ""
	for attempt := range 3 {
		if _, err = pullVerify(ctx, r, repo, "@"+d.String()); err == nil {
			w.acks.add(kind+": pulled and verified", 1)
			w.judgeLinks(ctx, kind, repo, d, acked, put)
			return
		}
		if ctx.Err() != nil {
			return
		}
		class = errorClass(err)
		if !retryable(err) && class != "connection" || !backoff(ctx, 100*time.Millisecond, attempt) {
			break
		}
	}
	_, raced := w.userDeleted.Load(repo + "@" + d.String())
	manifestGone := strings.Contains(class, "MANIFEST_UNKNOWN")
	took := time.Since(put).Round(time.Millisecond)
	switch {
	case manifestGone && raced:
		w.acks.add(kind+": manifest gone, a DELETE of it raced the PUT", 1)
	case (manifestGone || lossClass(class)) && took > window:
		w.acks.add(kind+": pull ended more than W after the PUT: "+class, 1)
	case manifestGone || lossClass(class):
		diag := w.c.diagnose(repo, d, err)
		verdict := "still broken a second later"
		if pullableWithin(ctx, r, repo, d, time.Second) {
			verdict = "pullable again within a second"
		}
		w.violation(kind, "manifest %s@%s acknowledged with 201 through %s, then not pullable through %s: %s (%v) %v after the PUT; %s; %s",
			repo, d, acked.URL, r.URL, class, err, took, verdict, diag)
	default:
		w.acks.add(kind+": not verified: "+class, 1)
	}
}

// judgeLinks: an acknowledged manifest's blobs (an image's config and
// layers) have their layer links in the repository, an index's children
// their revision links, in storage. A blob the repository does not link is
// not protected by GC: the image would break once the blob's other
// repositories let go of it, although every pull succeeds today (a stale
// descriptor cache answered the PUT's verification). The PUT touched every
// link it verified, so no collect may remove one within W of it.
func (w *workload) judgeLinks(ctx context.Context, kind, repo string, d v1.Hash, acked *registrytest.Registry, put time.Time) {
	missing, err := w.unlinked(ctx, repo, digest.Digest(d.String()), 0)
	switch {
	case err != nil:
		w.acks.add(kind+": links not checked: "+err.Error(), 1)
	case len(missing) == 0:
	case time.Since(put) > window:
		w.acks.add(kind+": links checked more than W after the PUT", 1)
	default:
		w.violation(kind, "manifest %s@%s acknowledged with 201 through %s, pullable, but %s has no link to %v (%v after the PUT)",
			repo, d, acked.URL, repo, missing, time.Since(put).Round(time.Millisecond))
	}
}

// unlinked lists the blobs (layer links) and child manifests (revision
// links) manifest m references that repo does not link in storage. A
// manifest whose own revision link is gone (deleted concurrently) is not
// judged here. Only "not found" is missing: any other error (on S3, a
// request cancelled with the workload) is returned, and nothing judged.
func (w *workload) unlinked(ctx context.Context, repo string, m digest.Digest, depth int) ([]string, error) {
	if _, err := w.c.raw.Stat(ctx, layout.RevisionLinkPath(repo, m)); layout.IsNotFound(err) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	b, err := w.c.raw.GetContent(ctx, layout.BlobDataPath(m))
	if err != nil {
		return nil, fmt.Errorf("read manifest %s: %w", m, err)
	}
	var mf struct {
		Config    *v1.Descriptor  `json:"config"`
		Layers    []v1.Descriptor `json:"layers"`
		Manifests []v1.Descriptor `json:"manifests"`
	}
	if err := json.Unmarshal(b, &mf); err != nil {
		return nil, fmt.Errorf("parse manifest %s: %w", m, err)
	}
	var missing []string
	for _, c := range mf.Manifests {
		cd := digest.Digest(c.Digest.String())
		if _, err := w.c.raw.Stat(ctx, layout.RevisionLinkPath(repo, cd)); err != nil {
			if !layout.IsNotFound(err) {
				return nil, err // not known to be missing (on S3: a cancelled request)
			}
			missing = append(missing, "manifest "+cd.String())
			continue
		}
		if depth < 2 {
			more, err := w.unlinked(ctx, repo, cd, depth+1)
			if err != nil {
				return nil, err
			}
			missing = append(missing, more...)
		}
	}
	blobs := mf.Layers
	if mf.Config != nil {
		blobs = append([]v1.Descriptor{*mf.Config}, blobs...)
	}
	for _, l := range blobs {
		ld := digest.Digest(l.Digest.String())
		if _, err := w.c.raw.Stat(ctx, layout.LayerLinkPath(repo, ld)); err != nil {
			if !layout.IsNotFound(err) {
				return nil, err
			}
			missing = append(missing, "blob "+ld.String())
		}
	}
	return missing, nil
}

// judgeMount GETs a blob a mount just acknowledged with 201, through the
// other instance.
func (w *workload) judgeMount(ctx context.Context, repo string, d v1.Hash, acked *registrytest.Registry, at time.Time) {
	r := w.c.other(acked)
	err := fetchBlob(ctx, r, repo, d)
	if err == nil {
		w.races.add("mount acknowledged: blob read back", 1)
		return
	}
	class := errorClass(err)
	switch {
	case ctx.Err() != nil:
	case lossClass(class) && time.Since(at) <= window:
		w.violation("mount", "blob %s mounted into %s with 201 through %s, then %s through %s; %s",
			d, repo, acked.URL, class, r.URL, w.c.diagnose(repo, v1.Hash{}, err))
	default:
		w.races.add("mount acknowledged: read back "+class, 1)
	}
}

// judgeRefusal is for a manifest PUT answered "blob unknown" although every
// blob was uploaded (201) or HEADed (200) by this client within W: the
// registry contradicted an answer the client acted on.
func (w *workload) judgeRefusal(kind, repo string, ri *rawImage, a answer, since time.Time, how string) {
	if !strings.Contains(a.class, "BLOB_UNKNOWN") {
		return
	}
	if took := time.Since(since); took > window {
		w.races.add(kind+": PUT refused more than W after "+how+": "+a.class, 1)
		return
	}
	w.violation(kind, "manifest PUT %s@%s answered %s although %s (within W)", repo, ri.digest, a.class, how)
}

// putJudged PUTs ri's manifest into repo as tag through r, retrying
// refusals, and judges the answer: a 201 by pulling the manifest back
// (judgeAck), a refusal against what the client was told since (how,
// judgeRefusal).
func (w *workload) putJudged(ctx context.Context, kind string, r *registrytest.Registry, repo, tag string, ri *rawImage, since time.Time, how string) answer {
	putStart := time.Now()
	put := w.retry(ctx, kind+": put", func() answer { return putManifest(ctx, r, repo, tag, ri) })
	diagf("put %s:%s @%s via %s (started %s): %d blobs=%v", repo, tag, ri.digest, r.URL, putStart.Format("15:04:05.000"), put.code, ri.blobDigests())
	if put.code == http.StatusCreated {
		w.judgeAck(ctx, kind, repo, ri.digest, r, putStart)
	} else {
		w.judgeRefusal(kind, repo, ri, put, since, how)
	}
	return put
}
