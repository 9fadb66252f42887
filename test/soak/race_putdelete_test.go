package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// raceManifestPutDelete: one goroutine per instance, released together, PUT
// and DELETE the same manifest in the same repository. Two times in three
// the manifest is already there (pushed by digest before), so the DELETE has
// something to delete while the PUT writes the same links again.
func (w *workload) raceManifestPutDelete(outer context.Context) func(ctx context.Context, rng *rand.Rand) {
	return func(ctx context.Context, rng *rand.Rand) {
		repo := randomRepo(rng)
		tag := raceTags[rng.IntN(len(raceTags))]
		ri, err := w.rawImage(rng)
		if err != nil {
			return
		}
		putter := w.randomReg(rng)
		existing := rng.IntN(3) != 0
		if !w.putDeleteSetup(ctx, rng, repo, putter, ri, existing) || outer.Err() != nil {
			return
		}
		reference, to := tag, "tag"
		if rng.IntN(4) == 0 {
			reference, to = ri.digest.String(), "digest"
		}
		// Recorded before the release: the judges must know the DELETE was
		// issued whatever it answers.
		w.userDeleted.Store(repo+"@"+ri.digest.String(), true)
		if reference == tag {
			w.raced(repo, tag, ri.digest)
		}
		put, del, putStart := w.putWhileDelete(ctx, repo, reference, ri, putter)
		setup := "fresh"
		if existing {
			setup = "existing"
		}
		w.races.add(fmt.Sprintf("put+delete (%s manifest, PUT by %s): put %s, delete %s", setup, to, put.class, del.class), 1)
		if put.code == http.StatusCreated {
			w.judgeAck(ctx, "put+delete", repo, ri.digest, putter, putStart)
		}
		// pacing: a pause between races, not a wait for anything
		jitter(outer, rng, 50*time.Millisecond, 200*time.Millisecond)
	}
}

// putDeleteSetup pushes ri into repo by digest (existing), or uploads only
// its blobs through putter.
func (w *workload) putDeleteSetup(ctx context.Context, rng *rand.Rand, repo string, putter *registrytest.Registry, ri *rawImage, existing bool) bool {
	if existing {
		a, _ := w.pushRaw(ctx, "put+delete: setup", w.randomReg(rng), repo, ri.digest.String(), ri)
		if a.code != http.StatusCreated {
			w.races.add("put+delete: setup push "+a.class, 1)
			return false
		}
		return true
	}
	if a, ok := w.uploadAll(ctx, "put+delete: setup upload", putter, repo, ri); !ok {
		w.races.add("put+delete: setup upload "+a.class, 1)
		return false
	}
	return true
}

// putWhileDelete releases together a PUT of ri as reference through putter
// and a DELETE of it by digest through the other instance.
func (w *workload) putWhileDelete(ctx context.Context, repo, reference string, ri *rawImage, putter *registrytest.Registry) (put, del answer, putStart time.Time) {
	deleter := w.c.other(putter)
	release := make(chan struct{})
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
	return put, del, putStart
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
// a manifest that was PUT to that tag while a DELETE of it ran, or whose
// DELETE failed half-way: the ways a tag may be left dangling. It reads the
// tag's current link from storage.
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
	return d.String(), w.racedTags[repo+":"+tag][d] || w.failedDeletes[repo+"@"+d.String()]
}
