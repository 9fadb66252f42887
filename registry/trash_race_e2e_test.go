package registry_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ggcrv1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/reclaim/trashentry"
	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
	"github.com/reclaim-registry/reclaim/trash"
)

// The trash's interleavings (docs/gc-protocol.md, "The trash"), each
// forced with storage hooks through HTTP on both descriptor caches: no
// order loses data that is restored, and a restore never leaves a link to
// data that is gone.

// trashed pushes an image to repo:v1, untags it and collects repo with the
// trash on: the image's manifest and its three layer links are held.
func trashed(t *testing.T, g *gcRegistry, repo string) (ggcrv1.Image, digest.Digest, string) {
	t.Helper()
	img := registrytest.Image(t, layer(t), layer(t))
	d := push(t, g, repo+":v1", img)
	push(t, g, repo+":v1", registrytest.Image(t, layer(t)))
	g.settle(t)
	rep := g.collect(t, repo)
	if !contains(rep.ManifestsDeleted, d) || len(rep.LayersUnlinked) != 3 {
		t.Fatalf("collect: manifests %v, layer links %v", rep.ManifestsDeleted, rep.LayersUnlinked)
	}
	return img, digest.Digest(d.String()), rep.RunID
}

func (g *gcRegistry) purge(t *testing.T) trash.PurgeReport {
	t.Helper()
	code, b := g.post(t, "/gc/v1/trash/purge?older_than=0s")
	var pr trash.PurgeReport
	if code != http.StatusOK || json.Unmarshal(b, &pr) != nil {
		t.Fatalf("purge: %d %s", code, b)
	}
	return pr
}

// wantNoLoss checks what a restore said against storage: an entry put
// back has its data; whatever happened, every forward link has its data
// and its reverse link (g.checkLinks: no broken_forward).
func wantNoLoss(t *testing.T, g *gcRegistry, rep trash.RestoreReport) {
	t.Helper()
	wantDataOf(t, g, rep)
	g.checkLinks(t)
}

// wantDataOf checks that every entry the restore put back has its data.
func wantDataOf(t *testing.T, g *gcRegistry, rep trash.RestoreReport) {
	t.Helper()
	for _, e := range rep.Entries {
		if e.Outcome != trashentry.Restored && e.Outcome != trashentry.AlreadyThere {
			continue
		}
		if _, err := g.raw.Stat(t.Context(), layout.BlobDataPath(e.Entry.Digest)); err != nil {
			t.Errorf("entry %s (%s %s) restored, but its data: %v", e.Entry.ID, e.Entry.Kind, e.Entry.Digest, err)
		}
	}
}

func outcomeOf(rep trash.RestoreReport, kind reclaim.ObjectKind, d digest.Digest) trashentry.Outcome {
	for _, e := range rep.Entries {
		if e.Entry.Kind == kind && e.Entry.Digest == d {
			return e.Outcome
		}
	}
	return ""
}

// A purge paused right after it dropped a hold, before it fences the
// blob; a restore of the run meanwhile puts everything back: the purge's
// re-check under the fence then finds the links and frees nothing.
func TestE2ETrashRestoreVsPurgeAfterItsDrop(t *testing.T) {
	onEachCache(t, func(t *testing.T, g *gcRegistry) {
		repo := "team/app"
		_, d, run := trashed(t, g, repo)
		g.settle(t)
		dropped := storagetest.NewGate("Delete", "/_repositories/_trash/")
		gcHook.SetAfter(t, dropped.WaitAfter)
		purged := make(chan trash.PurgeReport, 1)
		go func() { purged <- g.purge(t) }()
		<-dropped.Reached
		rep := g.restore(t, "run="+run)
		dropped.Release()
		pr := <-purged
		if rep.Restored != 4 || rep.Left != 0 {
			t.Fatalf("restore while the purge was paused: %+v", rep)
		}
		if pr.BlobsFreed != 0 {
			t.Fatalf("the purge freed %d blobs of a restored image: %+v", pr.BlobsFreed, pr)
		}
		registrytest.AssertPullable(t, g.Registry, repo+"@"+d.String())
		wantNoLoss(t, g, rep)
	})
}

// A restore paused right after it wrote the reverse link of its first
// layer link, before the forward link; a whole purge runs meanwhile: the
// reverse link keeps that blob, the rest is freed, and the restore then
// answers purged for what it cannot put back, leaving no link to missing
// data.
func TestE2ETrashRestoreVsPurgeAfterItsReverseLink(t *testing.T) {
	onEachCache(t, func(t *testing.T, g *gcRegistry) {
		repo := "team/app"
		_, d, run := trashed(t, g, repo)
		g.settle(t)
		reverse := storagetest.NewGate("PutContent", "/_repositories/"+repo+"/_layers/link")
		gcHook.SetAfter(t, reverse.WaitAfter)
		restored := make(chan trash.RestoreReport, 1)
		go func() { restored <- g.restore(t, "run="+run) }()
		<-reverse.Reached
		pr := g.purge(t)
		reverse.Release()
		rep := <-restored
		if pr.BlobsFreed != 3 {
			t.Fatalf("purge while a restore held one blob's reverse link: %d blobs freed, want 3: %+v", pr.BlobsFreed, pr)
		}
		if o := outcomeOf(rep, reclaim.KindManifest, d); o != trashentry.Purged {
			t.Fatalf("restore of the purged manifest: %q, want purged: %+v", o, rep)
		}
		if rep.Restored != 1 {
			t.Fatalf("restore: %d put back, want the one layer link it had written: %+v", rep.Restored, rep)
		}
		if code := registrytest.ManifestStatus(t, g.Registry, repo+"@"+d.String()); code != http.StatusNotFound {
			t.Fatalf("pull of the purged manifest: %d", code)
		}
		wantNoLoss(t, g, rep)
	})
}

// A purge paused holding a blob's GC fence, right before it deletes the
// data; a restore of the run meanwhile finds the data there (its Stat),
// and is paused right after that look while the purge deletes the data.
// The restore's link write then finds the blob collected: it answers
// purged for it (not failed), and no link to the deleted data is left.
func TestE2ETrashRestoreVsPurgeUnderItsFence(t *testing.T) {
	onEachCache(t, func(t *testing.T, g *gcRegistry) {
		repo := "team/app"
		img, d, run := trashed(t, g, repo)
		g.settle(t)
		var first digest.Digest // the blob whose data the purge deletes first
		fenced, releasePurge := make(chan struct{}), make(chan struct{})
		var once sync.Once
		setHook(t, func(_ context.Context, method, path string) error {
			if method != "Delete" {
				return nil
			}
			for _, b := range blobsOf(t, img) {
				if path == layout.BlobDir(b) {
					once.Do(func() { first = b; close(fenced); <-releasePurge })
				}
			}
			return nil
		})
		var armed atomic.Bool // only the restore's calls: the purge is paused when it is set
		var looked *storagetest.Gate
		gcHook.SetAfter(t, func(ctx context.Context, method, path string, err error) {
			if armed.Load() {
				looked.WaitAfter(ctx, method, path, err)
			}
		})
		purged := make(chan trash.PurgeReport, 1)
		go func() { purged <- g.purge(t) }()
		<-fenced
		// the restore's first look at that data (a Stat, or the read
		// of a manifest), right after it found it there
		looked = storagetest.NewGate("", layout.BlobDataPath(first))
		armed.Store(true)
		restored := make(chan trash.RestoreReport, 1)
		go func() { restored <- g.restore(t, "run="+run) }()
		<-looked.Reached
		close(releasePurge)
		pr := <-purged
		looked.Release()
		rep := <-restored
		t.Logf("purge: %d freed; restore: %+v", pr.BlobsFreed, rep)
		if pr.BlobsFreed == 0 {
			t.Fatalf("the purge freed nothing (the interleaving did not happen): %+v", pr)
		}
		for _, e := range rep.Entries {
			if e.Outcome == trashentry.Failed {
				t.Errorf("entry %s %s: failed (%s); the purge won, so it is purged", e.Entry.Kind, e.Entry.Digest, e.Detail)
			}
		}
		if o := outcomeOf(rep, reclaim.KindManifest, d); o != trashentry.Purged {
			t.Errorf("restore of the manifest: %q, want purged: %+v", o, rep)
		}
		wantNoLoss(t, g, rep)
	})
}

// trashedTag pushes v000 (older) and v001 to repo and applies a retention
// plan keeping the newest: v000's tag is held. It returns v000's digest
// and the plan id.
func trashedTag(t *testing.T, g *gcRegistry, repo string) (digest.Digest, string) {
	t.Helper()
	vs := history(t, g, repo, 2, time.Now().Add(-400*day), day)
	declare(t, g, "prod", img(repo, vs[1]))
	p := g.preview(t, repo, `{"keep_newest":1,"rollback_slack":0,"min_age":"1h"}`)
	wantCandidates(t, p, vs[:1])
	g.apply(t, repo, p.ID)
	if tagged(t, g, repo, tagName(0)) {
		t.Fatalf("apply left %s", tagName(0))
	}
	return vs[0], p.ID
}

func (g *gcRegistry) tagTarget(t *testing.T, repo, tag string) string {
	t.Helper()
	b, err := g.raw.GetContent(t.Context(), layout.TagCurrentPath(repo, tag))
	if err != nil {
		t.Fatalf("tag %s:%s: %v", repo, tag, err)
	}
	return string(b)
}

// A client pushed the tag again after retention removed it: the restore
// leaves the push's tag and answers tag_moved; the entry stays.
func TestE2ETrashRestoreAfterTagRepushed(t *testing.T) {
	onEachCache(t, func(t *testing.T, g *gcRegistry) {
		repo := "svc/app"
		_, _ = trashedTag(t, g, repo)
		pushed := push(t, g, repo+":"+tagName(0), registrytest.Image(t, layer(t)))
		rep := g.restore(t, "repository="+repo+"&tag="+tagName(0))
		if len(rep.Entries) != 1 || rep.Entries[0].Outcome != trashentry.TagMoved || rep.Left != 1 {
			t.Fatalf("restore of a re-pushed tag: %+v", rep)
		}
		if got := g.tagTarget(t, repo, tagName(0)); got != pushed.String() {
			t.Fatalf("the restore moved the pushed tag to %s", got)
		}
		if l := g.trashList(t, "repository="+repo+"&tag="+tagName(0)); l.Total != 1 {
			t.Fatalf("the tag_moved entry should stay: %+v", l)
		}
	})
}

// A push of the tag races the restore's tag write: the restore read the
// tag absent under the tag's fence and is paused there; the push writes
// the tag, finds the fence, waits for its release and finds its write
// overwritten by the restore's: it answers 503 (its retry moves the tag),
// never 201 for a tag that is gone.
func TestE2ETrashRestoreVsTagPush(t *testing.T) {
	onEachCache(t, func(t *testing.T, g *gcRegistry) {
		repo, tag := "svc/app", tagName(0)
		old, _ := trashedTag(t, g, repo)
		read := storagetest.NewGate("GetContent", layout.TagCurrentPath(repo, tag))
		tagWritten := make(chan struct{})
		var once sync.Once
		gcHook.SetAfter(t, func(ctx context.Context, method, path string, err error) {
			if method == "PutContent" && path == layout.TagCurrentPath(repo, tag) {
				once.Do(func() { close(tagWritten) })
			}
			read.WaitAfter(ctx, method, path, err)
		})
		restored := make(chan trash.RestoreReport, 1)
		go func() { restored <- g.restore(t, "repository="+repo+"&tag="+tag) }()
		<-read.Reached
		moved := registrytest.Image(t, layer(t))
		pushed := make(chan error, 1)
		go func() {
			pushed <- remote.Write(g.Ref(t, repo+":"+tag), moved,
				append(g.Remote(t), remote.WithRetryBackoff(remote.Backoff{Duration: time.Millisecond, Steps: 1}))...)
		}()
		var pushErr error
		pushDone := false
		select {
		case <-tagWritten: // the push wrote the tag and checks the tag's fence
		case pushErr = <-pushed:
			pushDone = true
		}
		read.Release()
		rep := <-restored
		if !pushDone {
			pushErr = <-pushed
		}
		t.Logf("push: %v; restore: %+v", pushErr, rep)
		got := g.tagTarget(t, repo, tag)
		if pushErr == nil {
			t.Fatalf("the push of %s was acknowledged, and the tag now points at %s (restore: %+v)", tag, got, rep)
		}
		var te *transport.Error
		if !errors.As(pushErr, &te) || te.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("push during the restore: %v, want 503", pushErr)
		}
		if got != old.String() || rep.Restored != 1 {
			t.Fatalf("push refused, but the tag points at %s (restored %s): %+v", got, old, rep)
		}
		registrytest.AssertPullable(t, g.Registry, repo+":"+tag)
		if d := push(t, g, repo+":"+tag, moved); g.tagTarget(t, repo, tag) != d.String() {
			t.Fatalf("the retried push did not move %s", tag)
		}
		registrytest.AssertPullable(t, g.Registry, repo+":"+tag)
	})
}

// A restore paused before the revision link of its manifest (its layer
// links are back) while a collect of the same repository deletes another
// untagged image: the restored layer links, which no manifest references
// yet, were touched by the restore, so the collect keeps them
// (recently_accessed) exactly as against a push; the image pulls.
func TestE2ETrashRestoreVsCollect(t *testing.T) {
	onEachCache(t, func(t *testing.T, g *gcRegistry) {
		repo := "team/app"
		img, d, run := trashed(t, g, repo)
		otherImg := registrytest.Image(t, layer(t))
		other := push(t, g, repo+"@"+digestOf(t, otherImg).String(), otherImg)
		g.settle(t)
		manifest := storagetest.NewGate("PutContent", layout.RevisionLinkPath(repo, d))
		setHook(t, manifest.Wait)
		restored := make(chan trash.RestoreReport, 1)
		go func() { restored <- g.restore(t, "run="+run) }()
		<-manifest.Reached
		code, body := g.collectRaw(t, repo, false)
		manifest.Release()
		rep := <-restored
		if code != http.StatusOK {
			t.Fatalf("collect: %d %s", code, body)
		}
		crep := decodeReport(t, body)
		if !contains(crep.ManifestsDeleted, other) {
			t.Fatalf("the collect should have deleted the other untagged image (the interleaving did not happen): %+v", crep.ManifestsDeleted)
		}
		for _, b := range blobsOf(t, img) {
			h := ggcrv1.Hash{Algorithm: "sha256", Hex: b.Encoded()}
			if contains(crep.LayersUnlinked, h) {
				t.Errorf("the collect unlinked %s while the restore put it back: %+v", b, crep)
			}
		}
		if rep.Restored != 4 || rep.Left != 0 {
			t.Fatalf("restore: %+v", rep)
		}
		registrytest.AssertPullable(t, g.Registry, repo+"@"+d.String())
		wantNoLoss(t, g, rep)
	})
}

// A restore that stalls for longer than the window between its layer
// links and its manifest (paused at its read of the manifest's data, after
// the run's layer links went back) while a collect of the
// repository finds those layer links unreferenced and older than the
// window, and removes them (into the trash again). The restore must not
// then answer restored for an image whose layers 404: it looks at its
// references again right before the revision link, as a manifest PUT does
// (case 11), and puts back what is gone.
func TestE2ETrashSlowRestoreVsCollect(t *testing.T) {
	onEachCache(t, func(t *testing.T, g *gcRegistry) {
		repo := "team/app"
		_, d, run := trashed(t, g, repo)
		g.settle(t)
		manifest := storagetest.NewGate("GetContent", layout.BlobDataPath(d))
		setHook(t, manifest.Wait)
		restored := make(chan trash.RestoreReport, 1)
		go func() { restored <- g.restore(t, "run="+run) }()
		<-manifest.Reached
		g.settle(t) // the restore stalls for longer than the window
		code, body := g.collectRaw(t, repo, false)
		manifest.Release()
		rep := <-restored
		if code != http.StatusOK {
			t.Fatalf("collect: %d %s", code, body)
		}
		if crep := decodeReport(t, body); len(crep.LayersUnlinked) != 3 {
			t.Fatalf("the collect should have unlinked the three restored layer links (the interleaving did not happen): %+v", crep.LayersUnlinked)
		}
		t.Logf("restore: %+v", rep)
		if outcomeOf(rep, reclaim.KindManifest, d) == trashentry.Restored {
			registrytest.AssertPullable(t, g.Registry, repo+"@"+d.String())
		} else if again := g.restore(t, "repository="+repo+"&digest="+d.String()); outcomeOf(again, reclaim.KindManifest, d) != trashentry.Restored {
			t.Fatalf("restore again: %+v", again)
		}
		registrytest.AssertPullable(t, g.Registry, repo+"@"+d.String())
		if l := g.trashList(t, "repository="+repo); l.Total != 0 {
			t.Fatalf("entries left after the image is back: %+v", l.Entries)
		}
		g.checkLinks(t)
	})
}
