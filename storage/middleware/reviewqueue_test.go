package middleware

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// An upload commit whose layer link is never written (here: the reverse
// link write fails, so the forward write fails) leaves a blob nobody links:
// the request queues it for review when it ends. A push that links every
// blob it commits queues nothing: the review costs no Redis round trip on
// the push path.
func TestCommitWithoutLinkIsQueued(t *testing.T) {
	a := newTestApp(t, appOptions{})
	ctx := context.Background()
	q := a.env.Queue()

	ok, err := random.Image(512, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.push("fine:v1", ok); err != nil {
		t.Fatal(err)
	}
	if n, _, err := q.Len(ctx); err != nil || n != 0 {
		t.Fatalf("a linked push queued %d blobs (%v)", n, err)
	}

	testHook.Set(t, func(ctx context.Context, m, p string) error {
		if m == "PutContent" && strings.Contains(p, "/_repositories/broken/_layers/") {
			return errors.New("injected")
		}
		return nil
	})
	img, err := random.Image(512, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.push("broken:v1", img, remote.WithRetryBackoff(remote.Backoff{Steps: 1})); err == nil {
		t.Fatal("push succeeded although no layer link could be written")
	}
	// The client uploads blobs concurrently and gives up at the first
	// failed link write: which blobs got committed varies, at least one did.
	_, blobs := imageDigests(t, img)
	committed := 0
	for _, b := range blobs {
		if _, err := a.env.Raw.Stat(ctx, layout.BlobDataPath(b)); err != nil {
			continue
		}
		committed++
		// A request the client gave up on may still be ending: it queues
		// its unlinked blob as it ends, after the client saw the failure.
		deadline := time.After(10 * time.Second)
		poll := time.NewTicker(10 * time.Millisecond)
		for queued, err := q.Contains(ctx, b); !queued; queued, err = q.Contains(ctx, b) {
			if err != nil {
				t.Fatalf("committed, unlinked blob %s: %v", b, err)
			}
			select {
			case <-deadline:
				t.Fatalf("committed, unlinked blob %s not queued for review", b)
			case <-poll.C:
			}
		}
		poll.Stop()
	}
	if committed == 0 {
		t.Fatal("no blob was committed, nothing to test")
	}
}

// An upload commit whose Move failed although the data landed (S3's Move
// is a copy and a delete: the copy may land and the call still fail, or a
// cancelled request never hear the answer) leaves a blob nobody links: it
// is queued for review all the same, before the client hears of the
// failure.
func TestFailedCommitThatLandedIsQueued(t *testing.T) {
	a := newTestApp(t, appOptions{})
	ctx := context.Background()
	layer, err := random.Layer(512, types.OCILayer)
	if err != nil {
		t.Fatal(err)
	}
	h, _ := layer.Digest()
	d := digest.Digest(h.String())
	rc, err := layer.Compressed()
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	testHook.Set(t, func(ctx context.Context, m, p string) error {
		if m != "Move" || p != layout.BlobDataPath(d) {
			return nil
		}
		if err := a.env.Raw.PutContent(ctx, p, data); err != nil {
			return err
		}
		return errors.New("injected: the copy landed, its answer was lost")
	})
	repo, err := name.NewRepository(a.host+"/landed", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteLayer(repo, layer, remote.WithRetryBackoff(remote.Backoff{Steps: 1})); err == nil {
		t.Fatal("the upload succeeded although its commit failed")
	}
	if _, err := a.env.Raw.Stat(ctx, layout.BlobDataPath(d)); err != nil {
		t.Fatalf("the landed data is not there: %v", err)
	}
	if queued, err := a.env.Queue().Contains(ctx, d); err != nil || !queued {
		t.Fatalf("a blob whose commit failed after the data landed is not queued for review (queued=%v, %v)", queued, err)
	}
}

// A link delete whose request is cancelled after the reverse link went
// (on S3 every later call then fails) still finishes: its stat of the
// forward link is not cancelled, so the blob is queued for review instead
// of being left with a stale reverse link, or with no link and no review.
func TestUnlinkFinishesAfterCancel(t *testing.T) {
	a := newTestApp(t, appOptions{})
	ctx := context.Background()
	img := a.pushRandom("cancelled:v1", 1)
	m, _ := imageDigests(t, img)
	revision := layout.RevisionLinkPath("cancelled", m)
	testHook.Set(t, func(ctx context.Context, method, p string) error {
		if method == "Stat" && p == revision && ctx.Done() != nil {
			return context.Canceled // as a cancelled request's S3 call fails
		}
		return nil
	})
	if code := a.do(http.MethodDelete, "/v2/cancelled/manifests/"+m.String()).StatusCode; code != http.StatusAccepted {
		t.Fatalf("DELETE manifest: %d", code)
	}
	rev := layout.ReverseLinkPath(m, "cancelled", reclaim.LinkManifest)
	if _, err := a.env.Raw.Stat(ctx, rev); !layout.IsNotFound(err) {
		t.Errorf("the reverse link of the deleted revision link is still there (%v): a stale reverse link", err)
	}
	if queued, err := a.env.Queue().Contains(ctx, m); err != nil || !queued {
		t.Errorf("the manifest whose last link went is not queued for review (queued=%v, %v)", queued, err)
	}
}
