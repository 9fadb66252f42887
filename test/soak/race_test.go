package soak

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// The racers run unserialised, deliberately conflicting operations next to
// the workload's clients, and are judged by invariants, not by a model of
// what the registry should hold:
//
//   - raceManifestPutDelete: the same manifest PUT (to a tag) through one
//     instance and DELETEd by digest through the other, released together.
//   - raceHeadAfterCollect: a repository is collected through one instance,
//     then the blobs the collect removed are HEADed through the other, whose
//     blob descriptor cache may still hold them; a client that trusts HEAD
//     then uploads only what HEAD called missing and PUTs the manifest.
//   - raceCollectVsRelink: a collect of a repository released together with
//     a re-upload of blobs it is about to delete (into the same repository)
//     and a cross-repository mount of others (out of it), each followed by
//     the manifest PUT that uses them.
//
// Judges: every 201 to a manifest PUT is pulled by digest right away
// (judgeAck) and its blobs must be linked in its repository (judgeLinks);
// every mount 201 is followed by a GET of the blob; a HEAD of a
// blob whose repository link the collect just removed must not answer 200
// while storage shows the link absent; an upload or HEAD answer a client
// acted on within W must not be contradicted by the manifest PUT
// (BLOB_UNKNOWN); after the workload every listed tag resolves to a complete
// image (verifyAll) unless it is a tag recorded in racedTags; linkdb verify
// finds no forward link without its reverse link.

// raceTags are the tags the put/delete racer PUTs to: few, so that tags move
// and the final verification stays short.
var raceTags = []string{"race-a", "race-b"}

// rawImage is an image as a plain HTTP client pushes it.
type rawImage struct {
	digest    v1.Hash
	mediaType string
	manifest  []byte
	blobs     []rawBlob
}

type rawBlob struct {
	d      v1.Hash
	b      []byte
	unique bool // not a shared base layer: only this image links it
}

func (w *workload) rawImage(rng *rand.Rand) (*rawImage, error) {
	img, err := w.image(rng)
	if err != nil {
		return nil, err
	}
	ri := &rawImage{}
	if ri.digest, err = img.Digest(); err != nil {
		return nil, err
	}
	mt, err := img.MediaType()
	if err != nil {
		return nil, err
	}
	ri.mediaType = string(mt)
	if ri.manifest, err = img.RawManifest(); err != nil {
		return nil, err
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		return nil, err
	}
	cd, err := img.ConfigName()
	if err != nil {
		return nil, err
	}
	ri.blobs = append(ri.blobs, rawBlob{d: cd, b: cfg, unique: true})
	base := map[v1.Hash]bool{}
	for _, l := range w.base {
		d, _ := l.Digest()
		base[d] = true
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, err
	}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return nil, err
		}
		rc, err := l.Compressed()
		if err != nil {
			return nil, err
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return nil, err
		}
		ri.blobs = append(ri.blobs, rawBlob{d: d, b: b, unique: !base[d]})
	}
	return ri, nil
}

// answer is a registry response as the racers judge it.
type answer struct {
	code  int
	class string // "<code> <CODE>" from the error body, or a short label
	hdr   http.Header
}

func (a answer) String() string { return a.class }

// do sends one request; target is a path ("/v2/...") or an absolute URL (a
// Location header).
func do(ctx context.Context, r *registrytest.Registry, method, target string, hdr map[string]string, body []byte) answer {
	if strings.HasPrefix(target, "/") {
		target = r.URL + target
	}
	req, err := http.NewRequestWithContext(ctx, method, target, bytes.NewReader(body))
	if err != nil {
		return answer{class: "other: " + err.Error()}
	}
	req.ContentLength = int64(len(body))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	if r.Username != "" {
		req.SetBasicAuth(r.Username, r.Password)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{class: errorClass(err)}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	a := answer{code: resp.StatusCode, hdr: resp.Header, class: fmt.Sprintf("%d -", resp.StatusCode)}
	var eb struct {
		Errors []struct{ Code string } `json:"errors"`
	}
	if json.Unmarshal(b, &eb) == nil && len(eb.Errors) > 0 {
		a.class = fmt.Sprintf("%d %s", resp.StatusCode, eb.Errors[0].Code)
	}
	return a
}

// retry repeats a request refused as retryable (503, 429, connection) up
// to three times, as a client does, and counts the refusals under kind.
func (w *workload) retry(kind string, f func() answer) answer {
	var a answer
	for attempt := range 3 {
		a = f()
		if a.code != http.StatusServiceUnavailable && a.code != http.StatusTooManyRequests && a.code != 0 {
			return a
		}
		w.races.add(kind+" refused (retried): "+a.class, 1)
		time.Sleep(time.Duration(100*(attempt+1)) * time.Millisecond)
	}
	return a
}

func headBlob(ctx context.Context, r *registrytest.Registry, repo string, d v1.Hash) answer {
	return do(ctx, r, http.MethodHead, "/v2/"+repo+"/blobs/"+d.String(), nil, nil)
}

func headManifest(ctx context.Context, r *registrytest.Registry, repo string, ri *rawImage) answer {
	return do(ctx, r, http.MethodHead, "/v2/"+repo+"/manifests/"+ri.digest.String(), map[string]string{"Accept": ri.mediaType}, nil)
}

// uploadBlob uploads b into repo: POST, then a monolithic PUT with the digest.
func uploadBlob(ctx context.Context, r *registrytest.Registry, repo string, b rawBlob) answer {
	start := do(ctx, r, http.MethodPost, "/v2/"+repo+"/blobs/uploads/", nil, nil)
	if start.code != http.StatusAccepted {
		return start
	}
	u, err := url.Parse(start.hdr.Get("Location"))
	if err != nil {
		return answer{class: "other: bad Location"}
	}
	q := u.Query()
	q.Set("digest", b.d.String())
	u.RawQuery = q.Encode()
	return do(ctx, r, http.MethodPut, u.String(), map[string]string{"Content-Type": "application/octet-stream"}, b.b)
}

func putManifest(ctx context.Context, r *registrytest.Registry, repo, reference string, ri *rawImage) answer {
	return do(ctx, r, http.MethodPut, "/v2/"+repo+"/manifests/"+reference, map[string]string{"Content-Type": ri.mediaType}, ri.manifest)
}

// pushRaw uploads every blob of ri into repo and PUTs its manifest as
// reference, retrying refusals. It returns the manifest PUT's answer and
// when that PUT started.
func (w *workload) pushRaw(ctx context.Context, kind string, r *registrytest.Registry, repo, reference string, ri *rawImage) (answer, time.Time) {
	for _, b := range ri.blobs {
		if a := w.retry(kind+" upload", func() answer { return uploadBlob(ctx, r, repo, b) }); a.code != http.StatusCreated {
			return a, time.Time{}
		}
	}
	put := time.Now()
	return w.retry(kind+" put", func() answer { return putManifest(ctx, r, repo, reference, ri) }), put
}

// collectReport is the part of a collect's report the racers read.
type collectReport struct {
	code             int
	ManifestsDeleted []digest.Digest `json:"manifests_deleted"`
	LayersUnlinked   []digest.Digest `json:"layers_unlinked"`
	BlobsDeleted     []digest.Digest `json:"blobs_deleted"`
	BytesFreed       int64           `json:"bytes_freed"`
	Kept             []struct {
		Digest digest.Digest `json:"digest"`
		Reason string        `json:"reason"`
	} `json:"kept"`
	Errors []struct {
		Code   string         `json:"code"`
		Detail map[string]any `json:"detail"`
	} `json:"errors"`
}

func (c *collectReport) unlinked(d v1.Hash) bool {
	for _, x := range c.LayersUnlinked {
		if x.String() == d.String() {
			return true
		}
	}
	return false
}

// keptBecause is the reason the collect gave for keeping d ("" if none).
func (c *collectReport) keptBecause(d v1.Hash) string {
	for _, k := range c.Kept {
		if k.Digest.String() == d.String() {
			return k.Reason
		}
	}
	return ""
}

func (c *collectReport) manifestDeleted(d v1.Hash) bool {
	for _, x := range c.ManifestsDeleted {
		if x.String() == d.String() {
			return true
		}
	}
	return false
}

// collectUntilRun collects repo through r, waiting out a collection another
// collector holds (409) for up to a few seconds.
func collectUntilRun(ctx context.Context, r *registrytest.Registry, repo string) (*collectReport, error) {
	var rep *collectReport
	var err error
	for range 20 {
		if rep, err = collectFull(ctx, r, repo); rep == nil || rep.code != http.StatusConflict {
			return rep, err
		}
		time.Sleep(250 * time.Millisecond)
	}
	return rep, err
}

// violation records a broken invariant with what storage shows.
func (w *workload) violation(kind, format string, args ...any) {
	w.fails.add(fmt.Sprintf("%s VIOLATION: %s [%s]", kind, fmt.Sprintf(format, args...), time.Now().Format("15:04:05.000")), 1)
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
		if !retryable(err) && class != "connection" {
			break
		}
		time.Sleep(time.Duration(100*(attempt+1)) * time.Millisecond)
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
		time.Sleep(time.Second)
		if _, again := pullVerify(ctx, r, repo, "@"+d.String()); again == nil {
			verdict = "pullable a second later"
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
// judged here.
func (w *workload) unlinked(ctx context.Context, repo string, m digest.Digest, depth int) ([]string, error) {
	if _, err := w.c.raw.Stat(ctx, layout.RevisionLinkPath(repo, m)); err != nil {
		return nil, nil
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

func (c *cluster) other(r *registrytest.Registry) *registrytest.Registry {
	for _, x := range c.regs {
		if x != r {
			return x
		}
	}
	return r
}

// raceLoop runs race until ctx is done. A race that started runs to the end
// on its own context, so that the workload's end does not cut a judge short.
func (w *workload) raceLoop(ctx context.Context, seed uint64, race func(ctx context.Context, rng *rand.Rand)) {
	rng := rand.New(rand.NewPCG(seed, 11))
	for ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		race(rctx, rng)
		cancel()
	}
}

// waitOut waits W (and a margin) or until the workload ends.
func waitOut(ctx context.Context, outer context.Context) bool {
	select {
	case <-outer.Done():
		return false
	case <-time.After(window + 500*time.Millisecond):
		return ctx.Err() == nil
	}
}

// raceManifestPutDelete: one goroutine per instance, released together, PUT
// and DELETE the same manifest in the same repository. Two times in three
// the manifest is already there (pushed by digest before), so the DELETE has
// something to delete while the PUT writes the same links again.
func (w *workload) raceManifestPutDelete(outer context.Context) func(ctx context.Context, rng *rand.Rand) {
	return func(ctx context.Context, rng *rand.Rand) {
		repo := soakRepos[rng.IntN(len(soakRepos))]
		tag := raceTags[rng.IntN(len(raceTags))]
		ri, err := w.rawImage(rng)
		if err != nil {
			return
		}
		putter := w.c.pick(rng.IntN(len(w.c.regs)))
		deleter := w.c.other(putter)
		pre := rng.IntN(3) != 0
		if pre {
			if a, _ := w.pushRaw(ctx, "put+delete: setup", w.c.pick(rng.IntN(len(w.c.regs))), repo, ri.digest.String(), ri); a.code != http.StatusCreated {
				w.races.add("put+delete: setup push "+a.class, 1)
				return
			}
		} else {
			for _, b := range ri.blobs {
				if a := w.retry("put+delete: setup upload", func() answer { return uploadBlob(ctx, putter, repo, b) }); a.code != http.StatusCreated {
					w.races.add("put+delete: setup upload "+a.class, 1)
					return
				}
			}
		}
		if outer.Err() != nil {
			return
		}
		reference := tag
		if rng.IntN(4) == 0 {
			reference = ri.digest.String()
		}
		// Recorded before the release: the judges must know the DELETE was
		// issued whatever it answers.
		w.userDeleted.Store(repo+"@"+ri.digest.String(), true)
		if reference == tag {
			w.raced(repo, tag, ri.digest)
		}
		release := make(chan struct{})
		var put, del answer
		var putStart time.Time
		var wg sync.WaitGroup
		wg.Go(func() {
			<-release
			putStart = time.Now()
			put = putManifest(ctx, putter, repo, reference, ri)
		})
		wg.Go(func() {
			<-release
			del = do(ctx, deleter, http.MethodDelete, "/v2/"+repo+"/manifests/"+ri.digest.String(), nil, nil)
		})
		close(release)
		wg.Wait()
		setup := "fresh"
		if pre {
			setup = "existing"
		}
		to := "tag"
		if reference != tag {
			to = "digest"
		}
		w.races.add(fmt.Sprintf("put+delete (%s manifest, PUT by %s): put %s, delete %s", setup, to, put.class, del.class), 1)
		if put.code == http.StatusCreated {
			w.judgeAck(ctx, "put+delete", repo, ri.digest, putter, putStart)
		}
		select {
		case <-outer.Done():
		case <-time.After(time.Duration(50+rng.IntN(200)) * time.Millisecond):
		}
	}
}

// raced records that a PUT of d to repo:tag ran while a DELETE of d did: the
// tag may be left pointing at a manifest that is gone.
func (w *workload) raced(repo, tag string, d v1.Hash) {
	w.mu.Lock()
	defer w.mu.Unlock()
	k := repo + ":" + tag
	if w.racedTags[k] == nil {
		w.racedTags[k] = map[v1.Hash]bool{}
	}
	w.racedTags[k][d] = true
}

// danglingOK reports whether repo:tag, whose manifest is unknown, points at
// a manifest that was PUT to that tag while a DELETE of it ran: the one way a
// tag may be left dangling. It reads the tag's current link from storage.
func (w *workload) danglingOK(repo, tag string) (string, bool) {
	b, err := w.c.raw.GetContent(context.Background(), layout.TagCurrentPath(repo, tag))
	if err != nil {
		return "tag link unreadable: " + err.Error(), false
	}
	d, err := v1.NewHash(strings.TrimSpace(string(b)))
	if err != nil {
		return "tag link corrupt: " + err.Error(), false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return d.String(), w.racedTags[repo+":"+tag][d]
}

// raceHeadAfterCollect: an image pushed by digest (untagged) and pulled
// through the other instance (so both instances' descriptor caches hold its
// blobs) is left alone for W and collected through one instance; right
// after the collect, the other instance is asked (HEAD) about every blob and
// the manifest, and a client that trusts the answers pushes the image again
// to a tag, uploading only what HEAD called missing.
func (w *workload) raceHeadAfterCollect(outer context.Context) func(ctx context.Context, rng *rand.Rand) {
	return func(ctx context.Context, rng *rand.Rand) {
		repo := soakRepos[rng.IntN(len(soakRepos))]
		collector := w.c.pick(rng.IntN(len(w.c.regs)))
		client := w.c.other(collector)
		ri, err := w.rawImage(rng)
		if err != nil {
			return
		}
		if a, _ := w.pushRaw(ctx, "head after collect: setup", collector, repo, ri.digest.String(), ri); a.code != http.StatusCreated {
			w.races.add("head after collect: setup push "+a.class, 1)
			return
		}
		if _, err := pullVerify(ctx, client, repo, "@"+ri.digest.String()); err != nil {
			w.races.add("head after collect: setup pull "+errorClass(err), 1)
			return
		}
		if !waitOut(ctx, outer) {
			return
		}
		rep, err := collectUntilRun(ctx, collector, repo)
		switch {
		case err != nil:
			w.races.add("head after collect: collect "+errorClass(err), 1)
			return
		case rep.code != http.StatusOK:
			w.races.add(fmt.Sprintf("head after collect: collect %d", rep.code), 1)
			return
		}
		if !rep.manifestDeleted(ri.digest) {
			// kept (a client touched a blob it shares), or a random
			// collector deleted it first: the HEADs below are judged by
			// what storage shows
			why := rep.keptBecause(ri.digest)
			if why == "" {
				why = "not in its plan (another collect deleted it first)"
			}
			w.races.add("head after collect: manifest not deleted by this collect: "+why, 1)
		}
		// Right after the collect, through the other instance.
		headStart := time.Now()
		missing := map[v1.Hash]bool{}
		trusted := false
		for _, b := range ri.blobs {
			a := headBlob(ctx, client, repo, b.d)
			gone := rep.unlinked(b.d)
			w.races.add(fmt.Sprintf("head after collect: HEAD of a blob %s: %s", goneWord(gone), a.class), 1)
			switch a.code {
			case http.StatusOK:
				trusted = true
				w.checkHeadTruth(ctx, repo, b.d, client, gone)
			default:
				missing[b.d] = true
			}
		}
		ma := headManifest(ctx, client, repo, ri)
		w.races.add(fmt.Sprintf("head after collect: HEAD of the manifest %s: %s", goneWord(rep.manifestDeleted(ri.digest)), ma.class), 1)
		if ma.code == http.StatusOK {
			// the HEAD touched it: no collect can remove it for W
			if _, err := w.c.raw.Stat(ctx, layout.RevisionLinkPath(repo, digest.Digest(ri.digest.String()))); err != nil {
				w.violation("head after collect", "HEAD %s/manifests/%s through %s answered 200 right after a collect through %s (deleted it: %v); its revision link is absent (%v)",
					repo, ri.digest, client.URL, collector.URL, rep.manifestDeleted(ri.digest), err)
			}
		}
		// A client that trusts HEAD.
		pusher := w.c.pick(rng.IntN(len(w.c.regs)))
		for _, b := range ri.blobs {
			if !missing[b.d] {
				continue
			}
			if a := w.retry("head after collect: upload", func() answer { return uploadBlob(ctx, pusher, repo, b) }); a.code != http.StatusCreated {
				w.races.add("head after collect: upload "+a.class, 1)
				return
			}
		}
		tag := "race-h"
		putStart := time.Now()
		put := w.retry("head after collect: put", func() answer { return putManifest(ctx, pusher, repo, tag, ri) })
		w.races.add(fmt.Sprintf("head after collect: push trusting HEAD (%d of %d blobs skipped): put %s",
			len(ri.blobs)-len(missing), len(ri.blobs), put.class), 1)
		switch {
		case put.code == http.StatusCreated:
			w.judgeAck(ctx, "head after collect", repo, ri.digest, pusher, putStart)
		case trusted:
			w.judgeRefusal("head after collect", repo, ri, put, headStart, "HEAD answered 200 for the blobs it skipped")
		default:
			w.judgeRefusal("head after collect", repo, ri, put, headStart, "every blob was uploaded (201)")
		}
	}
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

// raceCollectVsRelink: two images pushed by digest (untagged) into repo are
// left alone for W. Then, released together: a collect of repo through one
// instance; a re-upload of the first image's blobs into repo and its
// manifest PUT; a mount of the second image's blobs from repo into another
// repository (an upload where the mount is refused) and its manifest PUT
// there.
func (w *workload) raceCollectVsRelink(outer context.Context) func(ctx context.Context, rng *rand.Rand) {
	return func(ctx context.Context, rng *rand.Rand) {
		repo := soakRepos[rng.IntN(len(soakRepos))]
		into := soakRepos[rng.IntN(len(soakRepos))]
		for into == repo {
			into = soakRepos[rng.IntN(len(soakRepos))]
		}
		collector := w.c.pick(rng.IntN(len(w.c.regs)))
		re, err1 := w.rawImage(rng)
		mo, err2 := w.rawImage(rng)
		if err1 != nil || err2 != nil {
			return
		}
		for i, ri := range []*rawImage{re, mo} {
			r := w.c.pick(rng.IntN(len(w.c.regs)))
			if a, _ := w.pushRaw(ctx, "collect vs relink: setup", r, repo, ri.digest.String(), ri); a.code != http.StatusCreated {
				w.races.add("collect vs relink: setup push "+a.class, 1)
				return
			}
			// the other instance's caches learn the blobs too
			if _, err := pullVerify(ctx, w.c.pick(i+1), repo, "@"+ri.digest.String()); err != nil {
				w.races.add("collect vs relink: setup pull "+errorClass(err), 1)
				return
			}
		}
		if !waitOut(ctx, outer) {
			return
		}
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
			w.reupload(ctx, w.c.pick(rng.IntN(len(w.c.regs))), repo, re)
		})
		mounter := w.c.pick(rng.IntN(len(w.c.regs)))
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

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// reupload uploads every blob of ri into repo again and PUTs its manifest.
func (w *workload) reupload(ctx context.Context, r *registrytest.Registry, repo string, ri *rawImage) {
	start := time.Now()
	for _, b := range ri.blobs {
		a := w.retry("re-upload racing a collect: upload", func() answer { return uploadBlob(ctx, r, repo, b) })
		w.races.add("re-upload racing a collect: upload "+a.class, 1)
		if a.code != http.StatusCreated {
			return
		}
	}
	putStart := time.Now()
	put := w.retry("re-upload racing a collect: put", func() answer { return putManifest(ctx, r, repo, "race-r", ri) })
	w.races.add("re-upload racing a collect: put "+put.class, 1)
	if put.code == http.StatusCreated {
		w.judgeAck(ctx, "re-upload racing a collect", repo, ri.digest, r, putStart)
		return
	}
	w.judgeRefusal("re-upload racing a collect", repo, ri, put, start, "every blob was uploaded (201)")
}

// mountPush mounts every blob of ri from repo into into (uploading it where
// the mount is refused) and PUTs the manifest there.
func (w *workload) mountPush(ctx context.Context, r *registrytest.Registry, from, into string, ri *rawImage) {
	start := time.Now()
	for _, b := range ri.blobs {
		code := mount(ctx, r, from, into, b.d)
		w.races.add(fmt.Sprintf("mount racing a collect: mount %d", code), 1)
		switch code {
		case http.StatusCreated:
			w.judgeMount(ctx, into, b.d, r, time.Now())
			continue
		case http.StatusAccepted, http.StatusServiceUnavailable:
		default:
			return
		}
		a := w.retry("mount racing a collect: upload", func() answer { return uploadBlob(ctx, r, into, b) })
		w.races.add("mount racing a collect: upload after a refused mount "+a.class, 1)
		if a.code != http.StatusCreated {
			return
		}
	}
	putStart := time.Now()
	put := w.retry("mount racing a collect: put", func() answer { return putManifest(ctx, r, into, "race-m", ri) })
	w.races.add("mount racing a collect: put "+put.class, 1)
	if put.code == http.StatusCreated {
		w.judgeAck(ctx, "mount racing a collect", into, ri.digest, r, putStart)
		return
	}
	w.judgeRefusal("mount racing a collect", into, ri, put, start, "every blob was mounted or uploaded (201)")
}

// putClock records when a push's first manifest PUT started (ggcr pushes
// through it): the registry's protection of what that PUT verified starts
// there.
type putClock struct {
	base  http.RoundTripper
	mu    sync.Mutex
	first time.Time
}

func (p *putClock) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPut && strings.Contains(req.URL.Path, "/manifests/") {
		p.mu.Lock()
		if p.first.IsZero() {
			p.first = time.Now()
		}
		p.mu.Unlock()
	}
	return p.base.RoundTrip(req)
}

func (p *putClock) started() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.first.IsZero() {
		return time.Now()
	}
	return p.first
}

func newPutClock() *putClock { return &putClock{base: remote.DefaultTransport} }
