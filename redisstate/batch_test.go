package redisstate

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

// TouchBlobs answers for each blob as TouchBlob would: a fenced blob is
// refused and records nothing, a tombstone is reported, the others are
// recorded; and it works on a Redis that has not loaded the script yet.
func TestTouchBlobs(t *testing.T) {
	storagetest.ForEachBackend(t, func(t *testing.T, b storagetest.Backend) {
		ctx := context.Background()
		tr := newTestTracker(t, b)
		if err := tr.StartRecording(ctx); err != nil {
			t.Fatal(err)
		}
		age(t, tr, window)
		fenced, gone, fine := digest.FromString("fenced"), digest.FromString("gone"), digest.FromString("fine")
		if _, err := tr.Fence(ctx, reclaim.Object{Blob: fenced}, window, time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := tr.MarkGone(ctx, reclaim.Object{Blob: gone, Repo: "r"}); err != nil {
			t.Fatal(err)
		}
		if b.Mini != nil {
			// the pipeline meets NOSCRIPT and falls back (never flushed on
			// the shared real Redis)
			if err := tr.c.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		link := func(d digest.Digest) []reclaim.Object {
			return []reclaim.Object{{Blob: d, Repo: "r", Kind: reclaim.LinkLayer}}
		}
		res := tr.TouchBlobs(ctx, []BlobTouch{{Blob: fenced, Links: link(fenced)}, {Blob: gone, Links: link(gone)}, {Blob: fine, Links: link(fine)}})
		if len(res) != 3 || !errors.Is(res[0].Err, reclaim.ErrFenced) || res[1].Err != nil || len(res[1].Gone) != 1 || res[2].Err != nil || res[2].Gone != nil {
			t.Fatalf("TouchBlobs = %+v", res)
		}
		if _, ok, _ := tr.LastAccess(ctx, link(fenced)[0]); ok {
			t.Fatal("a fenced blob's link was recorded")
		}
		for _, o := range append(link(gone), link(fine)...) {
			if _, ok, err := tr.LastAccess(ctx, o); !ok || err != nil {
				t.Fatalf("%v not recorded: %v", o, err)
			}
		}
	})
}
