package middleware

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

// A forward link re-created while its deletion is removing the reverse
// link: the deleter re-checks and restores the reverse link.
func TestUnlinkRace(t *testing.T) {
	storagetest.ForEachBackend(t, func(t *testing.T, b storagetest.Backend) {
		a := newTestApp(t, appOptions{redisAddr: b.Addr, prefix: b.Prefix})
		ctx := context.Background()
		d := a.env.Driver
		putBlobData(t, a, dA)
		if err := d.PutContent(ctx, layout.LayerLinkPath("r", dA), []byte(dA)); err != nil {
			t.Fatal(err)
		}
		raced := false
		testHook.Set(t, func(ctx context.Context, m, p string) error {
			if m == "Delete" && strings.Contains(p, "/_repositories/") && !raced {
				raced = true
				// a pusher re-links between the forward and reverse delete
				return d.PutContent(context.Background(), layout.LayerLinkPath("r", dA), []byte(dA))
			}
			return nil
		})
		if err := d.Delete(ctx, layout.LayerLinkPath("r", dA)); err != nil {
			t.Fatal(err)
		}
		if !raced {
			t.Fatal("hook never ran")
		}
		if has, _ := a.env.Links.Has(ctx, dA, reclaim.RepoLink{Repo: "r", Kind: reclaim.LinkLayer}); !has {
			t.Fatal("forward link exists but its reverse link was lost")
		}
		checkLinkDB(t, a.env.Raw)
	})
}

// A failed reverse-link write fails the forward write: no forward link
// without its reverse link.
func TestReverseLinkWriteFailureFailsForward(t *testing.T) {
	a := newTestApp(t, appOptions{})
	ctx := context.Background()
	testHook.Set(t, func(ctx context.Context, m, p string) error {
		if m == "PutContent" && strings.Contains(p, "/_repositories/") {
			return errors.New("injected")
		}
		return nil
	})
	if err := a.env.Driver.PutContent(ctx, layout.LayerLinkPath("r", dA), []byte(dA)); err == nil {
		t.Fatal("forward write succeeded without its reverse link")
	}
	if _, err := a.env.Raw.Stat(ctx, layout.LayerLinkPath("r", dA)); err == nil {
		t.Fatal("forward link written")
	}
}

// A pusher that wrote its reverse link before the deleter removed it, and
// writes its forward link only after the deleter's re-check: the re-check
// cannot see the forward link yet, so the deleter must learn of the
// in-flight write from the access record the pusher's fence check left.
func TestUnlinkRaceWriterStraddles(t *testing.T) {
	storagetest.ForEachBackend(t, func(t *testing.T, b storagetest.Backend) {
		a := newTestApp(t, appOptions{redisAddr: b.Addr, prefix: b.Prefix})
		ctx := context.Background()
		d := a.env.Driver
		fwd := layout.LayerLinkPath("r", dA)
		putBlobData(t, a, dA)
		if err := d.PutContent(ctx, fwd, []byte(dA)); err != nil {
			t.Fatal(err)
		}
		var (
			started      bool
			writerAtFwd  = make(chan struct{})
			releaseWrite = make(chan struct{})
			writerDone   = make(chan error, 1)
		)
		testHook.Set(t, func(ctx context.Context, m, p string) error {
			switch {
			case m == "Delete" && strings.Contains(p, "/_repositories/") && !started:
				started = true
				// The pusher runs its fence check and writes its reverse
				// link now, then stalls before its forward link.
				go func() { writerDone <- d.PutContent(context.Background(), fwd, []byte(dA)) }()
				<-writerAtFwd
			case m == "PutContent" && p == fwd && started:
				close(writerAtFwd)
				<-releaseWrite
			}
			return nil
		})
		if err := d.Delete(ctx, fwd); err != nil {
			t.Fatal(err)
		}
		if !started {
			t.Fatal("hook never ran")
		}
		close(releaseWrite) // the forward link lands after the deleter is done
		if err := <-writerDone; err != nil {
			t.Fatal(err)
		}
		if has, _ := a.env.Links.Has(ctx, dA, reclaim.RepoLink{Repo: "r", Kind: reclaim.LinkLayer}); !has {
			t.Fatal("forward link exists but its reverse link was lost")
		}
		checkLinkDB(t, a.env.Raw)
	})
}

// putBlobData stores data for blob below the middleware: a link write is
// refused when it finds a tombstone and no data behind the link (dataBehind).
func putBlobData(t *testing.T, a *testApp, blob digest.Digest) {
	t.Helper()
	if err := a.env.Raw.PutContent(context.Background(), layout.BlobDataPath(blob), []byte("data")); err != nil {
		t.Fatal(err)
	}
}
