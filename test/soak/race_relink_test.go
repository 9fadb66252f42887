package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/reclaim-registry/reclaim/registry/registrytest"
)

// raceCollectVsRelink: two images pushed by digest (untagged) into repo are
// left alone for W. Then, released together: a collect of repo through one
// instance; a re-upload of the first image's blobs into repo and its
// manifest PUT; a mount of the second image's blobs from repo into another
// repository (an upload where the mount is refused) and its manifest PUT
// there.
func (w *workload) raceCollectVsRelink(outer context.Context) func(ctx context.Context, rng *rand.Rand) {
	return func(ctx context.Context, rng *rand.Rand) {
		repo, into := randomRepo(rng), randomRepo(rng)
		for into == repo {
			into = randomRepo(rng)
		}
		collector := w.randomReg(rng)
		re, err1 := w.rawImage(rng)
		mo, err2 := w.rawImage(rng)
		if err1 != nil || err2 != nil || !w.relinkSetup(ctx, rng, repo, re, mo) || !w.waitOut(ctx, outer) {
			return
		}
		uploader, mounter := w.randomReg(rng), w.randomReg(rng)
		release := make(chan struct{})
		var wg sync.WaitGroup
		var rep *collectReport
		var cerr error
		wg.Go(func() {
			<-release
			rep, cerr = collectUntilRun(ctx, collector, repo)
		})
		wg.Go(func() {
			<-release
			w.reupload(ctx, uploader, repo, re)
		})
		wg.Go(func() {
			<-release
			w.mountPush(ctx, mounter, repo, into, mo)
		})
		close(release)
		wg.Wait()
		switch {
		case cerr != nil:
			w.races.add("collect vs relink: collect "+errorClass(cerr), 1)
		case rep.code != http.StatusOK:
			w.races.add(fmt.Sprintf("collect vs relink: collect %d", rep.code), 1)
		default:
			w.races.add(fmt.Sprintf("collect vs relink: collect 200, deleted %d of the 2 manifests",
				btoi(rep.manifestDeleted(re.digest))+btoi(rep.manifestDeleted(mo.digest))), 1)
			w.races.add("collect vs relink: blobs those collects deleted", int64(len(rep.BlobsDeleted)))
		}
	}
}

// relinkSetup pushes each image by digest into repo and pulls it through
// the other instance, so that both instances' caches know the blobs.
func (w *workload) relinkSetup(ctx context.Context, rng *rand.Rand, repo string, images ...*rawImage) bool {
	for i, ri := range images {
		if a, _ := w.pushRaw(ctx, "collect vs relink: setup", w.randomReg(rng), repo, ri.digest.String(), ri); a.code != http.StatusCreated {
			w.races.add("collect vs relink: setup push "+a.class, 1)
			return false
		}
		if _, err := pullVerify(ctx, w.c.pick(i+1), repo, "@"+ri.digest.String()); err != nil {
			w.races.add("collect vs relink: setup pull "+errorClass(err), 1)
			return false
		}
	}
	return true
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// uploadCounted uploads b into repo through r, retrying refusals, counts
// the answer under kind and label, and reports whether it was a 201.
func (w *workload) uploadCounted(ctx context.Context, kind, label string, r *registrytest.Registry, repo string, b rawBlob) bool {
	a := w.retry(ctx, kind+": upload", func() answer { return uploadBlob(ctx, r, repo, b) })
	w.races.add(kind+": "+label+" "+a.class, 1)
	return a.code == http.StatusCreated
}

// reupload uploads every blob of ri into repo again and PUTs its manifest.
func (w *workload) reupload(ctx context.Context, r *registrytest.Registry, repo string, ri *rawImage) {
	const kind = "re-upload racing a collect"
	start := time.Now()
	for _, b := range ri.blobs {
		if !w.uploadCounted(ctx, kind, "upload", r, repo, b) {
			return
		}
	}
	put := w.putJudged(ctx, kind, r, repo, "race-r", ri, start, "every blob was uploaded (201)")
	w.races.add(kind+": put "+put.class, 1)
}

// mountPush mounts every blob of ri from repo into into (uploading it where
// the mount is refused) and PUTs the manifest there.
func (w *workload) mountPush(ctx context.Context, r *registrytest.Registry, from, into string, ri *rawImage) {
	const kind = "mount racing a collect"
	start := time.Now()
	for _, b := range ri.blobs {
		code := mount(ctx, r, from, into, b.d)
		w.races.add(fmt.Sprintf("%s: mount %d", kind, code), 1)
		switch code {
		case http.StatusCreated:
			w.judgeMount(ctx, into, b.d, r, time.Now())
			continue
		case http.StatusAccepted, http.StatusServiceUnavailable:
		default:
			return
		}
		if !w.uploadCounted(ctx, kind, "upload after a refused mount", r, into, b) {
			return
		}
	}
	put := w.putJudged(ctx, kind, r, into, "race-m", ri, start, "every blob was mounted or uploaded (201)")
	w.races.add(kind+": put "+put.class, 1)
}
