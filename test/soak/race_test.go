package soak

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/reclaim-registry/reclaim/registry/registrytest"
)

// The racers run unserialised, deliberately conflicting operations next to
// the workload's clients, and are judged by invariants, not by a model of
// what the registry should hold:
//
//   - raceManifestPutDelete (race_putdelete_test.go): the same manifest PUT
//     (to a tag) through one instance and DELETEd by digest through the
//     other, released together.
//   - raceHeadAfterCollect (race_headcollect_test.go): a repository is
//     collected through one instance, then the blobs the collect removed are
//     HEADed through the other, whose blob descriptor cache may still hold
//     them; a client that trusts HEAD then uploads only what HEAD called
//     missing and PUTs the manifest.
//   - raceCollectVsRelink (race_relink_test.go): a collect of a repository
//     released together with a re-upload of blobs it is about to delete
//     (into the same repository) and a cross-repository mount of others (out
//     of it), each followed by the manifest PUT that uses them.
//
// Judges (judge_test.go): every 201 to a manifest PUT is pulled by digest
// right away (judgeAck) and its blobs must be linked in its repository
// (judgeLinks); every mount 201 is followed by a GET of the blob; a HEAD of
// a blob whose repository link the collect just removed must not answer 200
// while storage shows the link absent; an upload or HEAD answer a client
// acted on within W must not be contradicted by the manifest PUT
// (BLOB_UNKNOWN); after the workload every listed tag resolves to a complete
// image (verifyAll) unless it is a tag recorded in racedTags; linkdb verify
// finds no forward link without its reverse link.

// raceTags are the tags the put/delete racer PUTs to: few, so that tags move
// and the final verification stays short.
var raceTags = []string{"race-a", "race-b"}

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

// waitOut waits until what was touched so far is a window old by Redis's
// clock; false when the workload (outer) ended first.
func (w *workload) waitOut(ctx context.Context, outer context.Context) bool {
	return w.c.passWindow(outer) == nil && ctx.Err() == nil
}

// randomRepo is one of the soak's repositories, drawn from rng.
func randomRepo(rng *rand.Rand) string { return soakRepos[rng.IntN(len(soakRepos))] }

// randomReg is one of the cluster's instances, drawn from rng.
func (w *workload) randomReg(rng *rand.Rand) *registrytest.Registry {
	return w.c.pick(rng.IntN(len(w.c.regs)))
}
