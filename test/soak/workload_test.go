package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/reclaim-registry/reclaim/internal/pause"
	"github.com/reclaim-registry/reclaim/registry/registrytest"
)

// layerSize keeps blobs small: the soak is about interleavings, not bytes.
const layerSize = 1024

var soakRepos = []string{"soak/base", "soak/app", "soak/team/svc", "soak/mirror"}

var soakTags = []string{"latest", "v1", "v2"}

// workload is the concurrent client side of a soak.
type workload struct {
	c       *cluster
	base    []v1.Layer // shared base layers: the same blobs in every repository
	ops     counters   // operations by kind and outcome
	fails   counters   // failures that lose data: the test fails on any
	refused counters   // retryable refusals, by error class
	// serverErrors are pushes that failed with a 5xx other than 503
	serverErrors counters
	gcStats      counters // collect results by status, bytes freed
	pushes       atomic.Int64
	// userDeleted holds "repo@digest" of manifests a client deleted by
	// digest; a pull that raced such a delete may fail legitimately.
	userDeleted sync.Map

	// racing turns the racers on (see race_test.go).
	racing bool
	races  counters // racing operations by kind and outcome
	acks   counters // acknowledged manifests pulled right after, by outcome

	mu     sync.Mutex
	pushed map[string][]v1.Hash // repo -> manifests pushed (for pulls by digest, subjects)
	// racedTags: "repo:tag" -> manifests PUT to that tag while a DELETE of
	// the same manifest ran; such a tag may be left dangling.
	racedTags map[string]map[v1.Hash]bool
	// failedDeletes: "repo@digest" of manifest DELETEs that failed with a
	// server error or got no answer. Upstream removes the revision link
	// before the tags, so one that fails half-way (a storage fault, or a
	// client that hung up and so cancelled the untag) may leave a tag
	// dangling; its client was never told it succeeded.
	failedDeletes map[string]bool
}

func newWorkload(c *cluster, baseLayers int) (*workload, error) {
	w := &workload{c: c, pushed: map[string][]v1.Hash{}, racedTags: map[string]map[v1.Hash]bool{}, failedDeletes: map[string]bool{}}
	for range baseLayers {
		l, err := random.Layer(layerSize, types.OCILayer)
		if err != nil {
			return nil, err
		}
		w.base = append(w.base, l)
	}
	return w, nil
}

func (w *workload) remember(repo string, d v1.Hash) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pushed[repo] = append(w.pushed[repo], d)
	if n := len(w.pushed[repo]); n > 64 {
		w.pushed[repo] = w.pushed[repo][n-64:]
	}
}

func (w *workload) somePushed(rng *rand.Rand, repo string) (v1.Hash, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ds := w.pushed[repo]
	if len(ds) == 0 {
		return v1.Hash{}, false
	}
	return ds[rng.IntN(len(ds))], true
}

// image builds an OCI image: one or two shared base layers and one unique.
func (w *workload) image(rng *rand.Rand) (v1.Image, error) {
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	layers := []v1.Layer{w.base[rng.IntN(len(w.base))]}
	if rng.IntN(2) == 0 {
		layers = append(layers, w.base[rng.IntN(len(w.base))])
	}
	unique, err := random.Layer(layerSize, types.OCILayer)
	if err != nil {
		return nil, err
	}
	layers = append(layers, unique)
	seen := map[v1.Hash]bool{}
	for _, l := range layers {
		d, _ := l.Digest()
		if seen[d] {
			continue
		}
		seen[d] = true
		if img, err = mutate.AppendLayers(img, l); err != nil {
			return nil, err
		}
	}
	return img, nil
}

// pushAck is what a push had acknowledged: the manifest the judge pulls.
type pushAck struct {
	repo string
	d    v1.Hash
	// pullable: remembered for other clients' pulls, referrers and deletes
	// once judged
	pullable bool
}

// push runs one push with up to 3 attempts; refusals are counted. An
// acknowledged push is pulled right away (judgeAck) before other clients
// learn of it.
func (w *workload) push(ctx context.Context, kind string, f func(r *registrytest.Registry, opts []remote.Option) (pushAck, error), rng *rand.Rand) {
	w.pushes.Add(1)
	for attempt := range 3 {
		r := w.randomReg(rng)
		start := time.Now()
		clock := newPutClock()
		p, err := f(r, append(remoteOpts(ctx, r), remote.WithTransport(clock)))
		if err == nil {
			w.ops.add(kind+" ok", 1)
			w.judgeAck(ctx, kind, p.repo, p.d, r, clock.started())
			if p.pullable {
				w.remember(p.repo, p.d)
			}
			return
		}
		if ctx.Err() != nil {
			return
		}
		class := errorClass(err)
		if retryable(err) || class == "connection" {
			w.refused.add(kind+" "+class, 1)
			if !backoff(ctx, 50*time.Millisecond, attempt) {
				return
			}
			continue
		}
		w.pushFailed(kind, class, time.Since(start))
		return
	}
	w.ops.add(kind+" gave up after refusals", 1)
}

// pushFailed counts a push that failed with class after took.
func (w *workload) pushFailed(kind, class string, took time.Duration) {
	switch {
	case strings.Contains(class, "BLOB_UNKNOWN") && took > window:
		// W must cover a push; one slower than W is not protected
		w.ops.add(kind+" slower than W: "+class, 1)
	case strings.HasPrefix(class, "5"):
		// A server error: with the filesystem driver, upstream's tag
		// write (temp file + rename) races a concurrent delete of the
		// same tag. Counted and bounded, not data loss: nothing was
		// tagged.
		w.serverErrors.add(fmt.Sprintf("%s %s", kind, class), 1)
		w.ops.add(kind+" failed", 1)
	default:
		// Anything else is a failed push: a broken image or a lost blob.
		w.fails.add(fmt.Sprintf("%s failed: %s", kind, class), 1)
		w.ops.add(kind+" failed", 1)
	}
}

// pushable is what ggcr pushes: an image or an index.
type pushable interface {
	remote.Taggable
	Digest() (v1.Hash, error)
}

// pushTo pushes m as repo:tag, for push; the manifest is remembered for
// other clients once judged.
func pushTo(repo, tag string, m pushable) func(r *registrytest.Registry, opts []remote.Option) (pushAck, error) {
	return func(r *registrytest.Registry, opts []remote.Option) (pushAck, error) {
		rf, err := ref(r, repo+":"+tag)
		if err != nil {
			return pushAck{}, err
		}
		if err := remote.Push(rf, m, opts...); err != nil {
			return pushAck{}, err
		}
		d, _ := m.Digest()
		return pushAck{repo, d, true}, nil
	}
}

// pull pulls by tag or digest and verifies every blob. A manifest that is
// gone is fine (another client deleted or moved it); a manifest that is
// there with a blob that is not is data loss, when the pull ran inside W
// (a pull slower than W is not protected by design and is only counted).
func (w *workload) pull(ctx context.Context, kind, repo, reference string, rng *rand.Rand) {
	r := w.randomReg(rng)
	start := time.Now()
	top, err := pullVerify(ctx, r, repo, reference)
	if err == nil {
		w.ops.add(kind+" ok", 1)
		return
	}
	if ctx.Err() != nil {
		return
	}
	class := errorClass(err)
	_, deleted := w.userDeleted.Load(repo + "@" + top.String())
	switch {
	case lossClass(class) && deleted:
		// a client deleted this manifest by digest during the pull: what
		// it referenced may go, by design
		w.ops.add(kind+" raced a manifest delete: "+class, 1)
	case lossClass(class) && time.Since(start) < window:
		took, diag := time.Since(start).Round(time.Millisecond), w.c.diagnose(repo, top, err)
		// Tell a transient refusal (the object was fenced by a GC step
		// that then kept it) from a loss: pull the same manifest again.
		verdict := "LOST"
		if pullableWithin(ctx, r, repo, top, time.Second) {
			verdict = "transient: refused while fenced, pullable again"
		}
		w.fails.add(fmt.Sprintf("%s: %s, %s (%v) [%s after %v; %s]", kind, class, verdict, err,
			time.Now().Format("15:04:05.000"), took, diag), 1)
	case lossClass(class):
		w.ops.add(kind+" slower than W: "+class, 1)
	default:
		w.ops.add(kind+" "+class, 1)
	}
}

// client runs random operations until ctx is done.
func (w *workload) client(ctx context.Context, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, seed*7+1))
	for ctx.Err() == nil {
		repo := randomRepo(rng)
		tag := soakTags[rng.IntN(len(soakTags))]
		switch n := rng.IntN(100); {
		case n < 25: // push an image (shared base layers) to a tag: moves the tag
			if img, err := w.image(rng); err == nil {
				w.push(ctx, "push image", pushTo(repo, tag, img), rng)
			}
		case n < 33:
			w.pushIndex(ctx, rng, repo, tag)
		case n < 41:
			w.pushReferrer(ctx, rng, repo)
		case n < 48:
			w.pushMounted(ctx, rng, repo, tag)
		case n < 56: // delete a tag
			code := del(ctx, w.randomReg(rng), "/v2/"+repo+"/manifests/"+tag)
			w.ops.add(fmt.Sprintf("delete tag %d", code), 1)
		case n < 60:
			w.deleteManifest(ctx, rng, repo)
		case n < 82:
			w.pull(ctx, "pull by tag", repo, ":"+tag, rng)
		default:
			if d, ok := w.somePushed(rng, repo); ok {
				w.pull(ctx, "pull by digest", repo, "@"+d.String(), rng)
			}
		}
	}
}

// pushIndex pushes a two-platform index to repo:tag.
func (w *workload) pushIndex(ctx context.Context, rng *rand.Rand, repo, tag string) {
	a, err1 := w.image(rng)
	b, err2 := w.image(rng)
	if err1 != nil || err2 != nil {
		return
	}
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex),
		mutate.IndexAddendum{Add: a, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
		mutate.IndexAddendum{Add: b, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64"}}})
	w.push(ctx, "push index", pushTo(repo, tag, idx), rng)
}

// pushReferrer pushes a referrer (a signature-like artifact) of something
// pushed to repo, by digest.
func (w *workload) pushReferrer(ctx context.Context, rng *rand.Rand, repo string) {
	subject, ok := w.somePushed(rng, repo)
	if !ok {
		return
	}
	hr := w.randomReg(rng)
	rf, err := ref(hr, repo+"@"+subject.String())
	if err != nil {
		return
	}
	desc, err := remote.Head(rf, remoteOpts(ctx, hr)...)
	if err != nil {
		// deleted by a client, or untagged and collected: no subject
		w.ops.add("push referrer: subject "+errorClass(err), 1)
		return
	}
	w.push(ctx, "push referrer", func(r *registrytest.Registry, opts []remote.Option) (pushAck, error) {
		art, err := random.Image(256, 1)
		if err != nil {
			return pushAck{}, err
		}
		art = mutate.MediaType(art, types.OCIManifestSchema1)
		art = mutate.ConfigMediaType(art, "application/vnd.reclaim.soak.signature")
		sub, ok := mutate.Subject(art, *desc).(v1.Image)
		if !ok {
			return pushAck{}, fmt.Errorf("mutate.Subject did not return an image")
		}
		d, err := sub.Digest()
		if err != nil {
			return pushAck{}, err
		}
		dr, err := ref(r, repo+"@"+d.String())
		if err != nil {
			return pushAck{}, err
		}
		return pushAck{repo, d, false}, remote.Write(dr, sub, opts...)
	}, rng)
}

// pushMounted mounts a base layer from a random repository into repo,
// then pushes an image using it to repo:tag.
func (w *workload) pushMounted(ctx context.Context, rng *rand.Rand, repo, tag string) {
	from := randomRepo(rng)
	img, err := w.image(rng)
	if err != nil {
		return
	}
	write := pushTo(repo, tag, img)
	w.push(ctx, "mount+push", func(r *registrytest.Registry, opts []remote.Option) (pushAck, error) {
		ls, _ := img.Layers()
		d, _ := ls[0].Digest()
		if code := mount(ctx, r, from, repo, d); code >= 500 && code != http.StatusServiceUnavailable {
			return pushAck{}, fmt.Errorf("mount: unexpected status code %d", code)
		}
		return write(r, opts)
	}, rng)
}

// deleteManifest deletes a manifest pushed to repo by digest (and every
// tag on it).
func (w *workload) deleteManifest(ctx context.Context, rng *rand.Rand, repo string) {
	d, ok := w.somePushed(rng, repo)
	if !ok {
		return
	}
	r := w.randomReg(rng)
	w.userDeleted.Store(repo+"@"+d.String(), true)
	code := del(ctx, r, "/v2/"+repo+"/manifests/"+d.String())
	w.ops.add(fmt.Sprintf("delete manifest %d", code), 1)
	if code >= 500 || code == 0 { // 0: no answer (the workload ended mid-request): the client cannot know
		w.mu.Lock()
		w.failedDeletes[repo+"@"+d.String()] = true
		w.mu.Unlock()
	}
}

// collector collects random repositories through r's GC API until ctx is
// done.
func (w *workload) collector(ctx context.Context, r *registrytest.Registry, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 3))
	for ctx.Err() == nil {
		repo := randomRepo(rng)
		code, freed, err := collect(ctx, r, repo)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			w.gcStats.add(fmt.Sprintf("collect %d %s", code, errorClass(err)), 1)
		default:
			w.gcStats.add(fmt.Sprintf("collect %d", code), 1)
			w.gcStats.add("collect bytes freed", freed)
		}
		// pacing: an operator's collects come now and then, not back to back
		jitter(ctx, rng, 100*time.Millisecond, 400*time.Millisecond)
	}
}

// auditor pulls every tag now and then while the workload runs.
func (w *workload) auditor(ctx context.Context, every time.Duration) {
	rng := rand.New(rand.NewPCG(99, 5))
	// pacing: an audit round every so often, whatever else happens
	pause.Every(ctx, every, func() {
		for _, repo := range soakRepos {
			tags, err := listTags(ctx, w.randomReg(rng), repo)
			if err != nil {
				continue
			}
			for _, tag := range tags {
				w.pull(ctx, "audit pull", repo, ":"+tag, rng)
			}
		}
	})
}

// run drives clients, a collector per instance and an auditor for d.
func (w *workload) run(ctx context.Context, d time.Duration, clients int) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() { w.client(ctx, uint64(i+1)) })
	}
	for i, r := range w.c.regs {
		wg.Go(func() { w.collector(ctx, r, uint64(100+i)) })
	}
	wg.Go(func() { w.auditor(ctx, 10*time.Second) })
	if w.racing {
		racers := map[string]func(context.Context) func(context.Context, *rand.Rand){
			requiredRaces[0]: w.raceManifestPutDelete, requiredRaces[1]: w.raceHeadAfterCollect, requiredRaces[2]: w.raceCollectVsRelink,
		}
		for i, kind := range requiredRaces {
			wg.Go(func() {
				rctx, stop := w.untilRaced(ctx, kind, raceGrace)
				defer stop()
				w.raceLoop(rctx, uint64(201+i), racers[kind](rctx))
			})
		}
	}
	wg.Wait()
}

// requiredRaces are the racers' outcomes a soak must have reached at least
// once (judgeSoak), by the prefix of the outcome it counts: a soak that never
// ran a race to its end proves nothing about it.
var requiredRaces = []string{"put+delete (", "head after collect: push trusting HEAD", "collect vs relink: collect"}

// raceGrace is how long a racer may go on after the workload when its race
// has not yet reached its end: on a loaded machine every setup can miss the
// window while the clients run.
const raceGrace = 2 * time.Minute

// untilRaced is ctx, except that once ctx is done it lasts until a race of
// kind has been counted or grace has passed.
func (w *workload) untilRaced(ctx context.Context, kind string, grace time.Duration) (context.Context, context.CancelFunc) {
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		select {
		case <-ctx.Done():
		case <-rctx.Done():
			return
		}
		deadline := time.NewTimer(grace)
		defer deadline.Stop()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for w.races.sum(kind) == 0 {
			select {
			case <-deadline.C:
				cancel()
				return
			case <-rctx.Done():
				return
			case <-tick.C:
			}
		}
		cancel()
	}()
	return rctx, cancel
}
