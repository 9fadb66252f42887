package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// headRace is one run of raceHeadAfterCollect: ri in repo, collected
// through collector and then asked about through client.
type headRace struct {
	repo              string
	ri                *rawImage
	collector, client *registrytest.Registry
	rep               *collectReport
}

// raceHeadAfterCollect: an image pushed by digest (untagged) and pulled
// through the other instance (so both instances' descriptor caches hold its
// blobs) is left alone for W and collected through one instance; right
// after the collect, the other instance is asked (HEAD) about every blob and
// the manifest, and a client that trusts the answers pushes the image again
// to a tag, uploading only what HEAD called missing.
func (w *workload) raceHeadAfterCollect(outer context.Context) func(ctx context.Context, rng *rand.Rand) {
	return func(ctx context.Context, rng *rand.Rand) {
		h, ok := w.headRaceSetup(ctx, outer, rng)
		if !ok || !w.headRaceCollect(ctx, h) {
			return
		}
		// Right after the collect, through the other instance.
		headStart := time.Now()
		missing, trusted := w.headAll(ctx, h)
		w.pushTrustingHead(ctx, h, w.randomReg(rng), missing, trusted, headStart)
	}
}

// headRaceSetup pushes an image by digest through the collector, pulls it
// through the client and waits out the window.
func (w *workload) headRaceSetup(ctx, outer context.Context, rng *rand.Rand) (*headRace, bool) {
	h := &headRace{repo: randomRepo(rng), collector: w.randomReg(rng)}
	h.client = w.c.other(h.collector)
	var err error
	if h.ri, err = w.rawImage(rng); err != nil {
		return nil, false
	}
	if a, _ := w.pushRaw(ctx, "head after collect: setup", h.collector, h.repo, h.ri.digest.String(), h.ri); a.code != http.StatusCreated {
		w.races.add("head after collect: setup push "+a.class, 1)
		return nil, false
	}
	if _, err := pullVerify(ctx, h.client, h.repo, "@"+h.ri.digest.String()); err != nil {
		w.races.add("head after collect: setup pull "+errorClass(err), 1)
		return nil, false
	}
	return h, w.waitOut(ctx, outer)
}

// headRaceCollect collects the repository through the collector.
func (w *workload) headRaceCollect(ctx context.Context, h *headRace) bool {
	rep, err := collectUntilRun(ctx, h.collector, h.repo)
	switch {
	case err != nil:
		w.races.add("head after collect: collect "+errorClass(err), 1)
		return false
	case rep.code != http.StatusOK:
		w.races.add(fmt.Sprintf("head after collect: collect %d", rep.code), 1)
		return false
	}
	h.rep = rep
	if !rep.manifestDeleted(h.ri.digest) {
		// kept (a client touched a blob it shares), or a random
		// collector deleted it first: the HEADs are judged by what
		// storage shows
		why := rep.keptBecause(h.ri.digest)
		if why == "" {
			why = "not in its plan (another collect deleted it first)"
		}
		w.races.add("head after collect: manifest not deleted by this collect: "+why, 1)
	}
	return true
}

// headAll HEADs every blob and the manifest through the client and checks
// every 200 against storage. It returns the blobs HEAD called missing and
// whether any HEAD answered 200.
func (w *workload) headAll(ctx context.Context, h *headRace) (missing map[v1.Hash]bool, trusted bool) {
	missing = map[v1.Hash]bool{}
	for _, b := range h.ri.blobs {
		a := headBlob(ctx, h.client, h.repo, b.d)
		gone := h.rep.unlinked(b.d)
		w.races.add(fmt.Sprintf("head after collect: HEAD of a blob %s: %s", goneWord(gone), a.class), 1)
		switch a.code {
		case http.StatusOK:
			trusted = true
			w.checkHeadTruth(ctx, h.repo, b.d, h.client, gone)
		default:
			missing[b.d] = true
		}
	}
	deleted := h.rep.manifestDeleted(h.ri.digest)
	ma := headManifest(ctx, h.client, h.repo, h.ri)
	w.races.add(fmt.Sprintf("head after collect: HEAD of the manifest %s: %s", goneWord(deleted), ma.class), 1)
	if ma.code == http.StatusOK {
		// the HEAD touched it: no collect can remove it for W
		if _, err := w.c.raw.Stat(ctx, layout.RevisionLinkPath(h.repo, digest.Digest(h.ri.digest.String()))); err != nil {
			w.violation("head after collect", "HEAD %s/manifests/%s through %s answered 200 right after a collect through %s (deleted it: %v); its revision link is absent (%v)",
				h.repo, h.ri.digest, h.client.URL, h.collector.URL, deleted, err)
		}
	}
	return missing, trusted
}

// pushTrustingHead is a client that trusts HEAD: it uploads through pusher
// only the blobs HEAD called missing, then PUTs the manifest to a tag.
func (w *workload) pushTrustingHead(ctx context.Context, h *headRace, pusher *registrytest.Registry, missing map[v1.Hash]bool, trusted bool, headStart time.Time) {
	for _, b := range h.ri.blobs {
		if !missing[b.d] {
			continue
		}
		if a := w.retry(ctx, "head after collect: upload", func() answer { return uploadBlob(ctx, pusher, h.repo, b) }); a.code != http.StatusCreated {
			w.races.add("head after collect: upload "+a.class, 1)
			return
		}
	}
	how := "every blob was uploaded (201)"
	if trusted {
		how = "HEAD answered 200 for the blobs it skipped"
	}
	put := w.putJudged(ctx, "head after collect", pusher, h.repo, "race-h", h.ri, headStart, how)
	w.races.add(fmt.Sprintf("head after collect: push trusting HEAD (%d of %d blobs skipped): put %s",
		len(h.ri.blobs)-len(missing), len(h.ri.blobs), put.class), 1)
}

func goneWord(gone bool) string {
	if gone {
		return "this collect removed"
	}
	return "this collect did not remove"
}

// checkHeadTruth: HEAD answered 200 for a blob. The HEAD touched the blob
// and its layer link, so no collect can remove either for W: storage must
// show both right after. For a blob the collect reported unlinked, that is
// true only if a client linked it again since (a shared base layer);
// otherwise the instance answered from a stale descriptor cache.
func (w *workload) checkHeadTruth(ctx context.Context, repo string, d v1.Hash, client *registrytest.Registry, unlinked bool) {
	dd := digest.Digest(d.String())
	_, linkErr := w.c.raw.Stat(ctx, layout.LayerLinkPath(repo, dd))
	_, dataErr := w.c.raw.Stat(ctx, layout.BlobDataPath(dd))
	switch {
	case linkErr == nil && dataErr == nil && unlinked:
		w.races.add("head after collect: HEAD 200 of an unlinked blob linked again since", 1)
	case linkErr == nil && dataErr == nil:
	default:
		w.violation("head after collect", "HEAD %s/blobs/%s through %s answered 200 right after a collect (which unlinked it: %v); storage: layer link %v, data %v",
			repo, d, client.URL, unlinked, errWord(linkErr), errWord(dataErr))
	}
}

func errWord(err error) string {
	if err == nil {
		return "present"
	}
	return "absent (" + err.Error() + ")"
}
