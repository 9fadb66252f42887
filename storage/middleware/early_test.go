package middleware

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

// A request that wrote its reverse link early and then failed before its
// forward link takes the reverse link back (early.go).
func TestEarlyReverseLinkTakenBack(t *testing.T) {
	storagetest.ForEachBackend(t, func(t *testing.T, b storagetest.Backend) {
		ctx := context.Background()
		a := newTestApp(t, appOptions{redisAddr: b.Addr, prefix: b.Prefix})
		// an upload commit under a digest its data does not have
		wrong := digest.FromString("not hello")
		if code := a.commitUpload(t, "r", wrong, "hello"); code != http.StatusBadRequest {
			t.Fatalf("commit with a wrong digest: %d, want 400", code)
		}
		if has, err := a.env.Links.Has(ctx, wrong, reclaim.RepoLink{Repo: "r", Kind: reclaim.LinkLayer}); has || err != nil {
			t.Fatalf("a failed commit left its early reverse link: %v %v", has, err)
		}
		// a manifest PUT into a repository that links none of its blobs
		img := a.pushRandom("r:v1", 2)
		m, _ := imageDigests(t, img)
		if code := a.putManifest("r2", "v1", img); code != http.StatusBadRequest {
			t.Fatalf("manifest PUT with missing references: %d, want 400", code)
		}
		if has, err := a.env.Links.Has(ctx, m, reclaim.RepoLink{Repo: "r2", Kind: reclaim.LinkManifest}); has || err != nil {
			t.Fatalf("a failed manifest PUT left its early reverse link: %v %v", has, err)
		}
		checkLinkDB(t, a.env.Raw)
		// the take-back looks at the forward link after its delete: a
		// forward link written meanwhile keeps its reverse link
		k := earlyKey{blob: m, link: reclaim.RepoLink{Repo: "r", Kind: reclaim.LinkManifest}}
		a.env.takeBack(ctx, k)
		if has, err := a.env.Links.Has(ctx, m, k.link); !has || err != nil {
			t.Fatalf("take-back removed the reverse link of an existing forward link: %v %v", has, err)
		}
		checkLinkDB(t, a.env.Raw)
		// an early reverse link the request found there (not written by
		// it) is not its own to take back: a failed commit leaves it
		there := reclaim.RepoLink{Repo: "r3", Kind: reclaim.LinkLayer}
		if err := a.env.Links.Put(ctx, wrong, there); err != nil {
			t.Fatal(err)
		}
		a.count.Reset()
		if code := a.commitUpload(t, "r3", wrong, "hello"); code != http.StatusBadRequest {
			t.Fatalf("commit with a wrong digest: %d, want 400", code)
		}
		if n := countCalls(a, "/_repositories/r3/", "Delete") + countCalls(a, "/_repositories/r3/", "PutContent"); n != 0 {
			t.Errorf("a failed commit wrote or deleted a reverse link it found there: %d calls", n)
		}
		if has, err := a.env.Links.Has(ctx, wrong, there); !has || err != nil {
			t.Fatalf("a failed commit took back a reverse link it had not written: %v %v", has, err)
		}
	})
}

// commitUpload uploads content into repo in one PUT under digest d and
// returns the status of the commit.
func (a *testApp) commitUpload(t *testing.T, repo string, d digest.Digest, content string) int {
	t.Helper()
	resp := a.do(http.MethodPost, "/v2/"+repo+"/blobs/uploads/")
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusAccepted || loc == "" {
		t.Fatalf("start upload: %d %q", resp.StatusCode, loc)
	}
	sep := "?"
	if strings.Contains(loc, "?") {
		sep = "&"
	}
	loc = strings.TrimPrefix(loc, a.srv.URL)
	return a.doBody(http.MethodPut, loc+sep+"digest="+d.String(), content).StatusCode
}

// An upload commit whose layer link write fails after its early reverse
// link was written: the write's answer was lost, and the link lands later
// (an S3 PUT cancelled once sent). The request ends with a 5xx; its early
// reverse link must stay, since a take-back's look at the forward link
// may come before the link lands: a forward link without its reverse link.
func TestFailedForwardWriteKeepsEarlyReverseLink(t *testing.T) {
	a := newTestApp(t, appOptions{})
	ctx := context.Background()
	content := "hello"
	d := digest.FromString(content)
	fwd := layout.LayerLinkPath("r", d)
	var failed atomic.Bool
	testHook.Set(t, func(_ context.Context, m, p string) error {
		if m == "PutContent" && p == fwd && !failed.Swap(true) {
			return errors.New("injected: the answer was lost")
		}
		return nil
	})
	if code := a.commitUpload(t, "r", d, content); code < 500 {
		t.Fatalf("commit whose link write failed: %d, want 5xx", code)
	}
	// the write lands after the request ended
	if err := a.env.Raw.PutContent(ctx, fwd, []byte(d)); err != nil {
		t.Fatal(err)
	}
	if has, err := a.env.Links.Has(ctx, d, reclaim.RepoLink{Repo: "r", Kind: reclaim.LinkLayer}); !has || err != nil {
		t.Fatalf("a failed forward write took its reverse link back: %v %v", has, err)
	}
	checkLinkDB(t, a.env.Raw)
}
