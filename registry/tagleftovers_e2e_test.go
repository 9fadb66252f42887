package registry_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/linkdb"
)

// A push moves svc/app:v1 while a tag deleter deletes it the way an object
// store deletes a directory: the keys of one listing, taken before the
// push's index entry (Distribution writes it before the current link) and
// deleted after the push's current link overwrote a listed key. The tag is
// then a directory holding only the push's index entry. The push is held
// right after its current link is written, while the deleter (this test,
// under the tag's fence, as retention deletes) removes what it listed and
// releases; the push's question then finds the fence's mark, reads its tag
// again, finds it gone and answers 503. Before, the directory stayed: the
// tag list (HTTP, as clients read it) named v1 while a pull of v1 answered
// 404 (what TestSoakS3 logged as "dangling tag directory"). Now the refused
// push removes it, under the tag's fence; its retry tags.
func TestE2ERefusedTagWriteLeavesNoTagDirectory(t *testing.T) {
	g := startRetention(t, nil)
	ctx := context.Background()
	const repo, tag = "svc/app", "v1"
	first := registrytest.Image(t, layer(t))
	if err := remote.Write(g.Ref(t, repo+":"+tag), first, g.Remote(t)...); err != nil {
		t.Fatal(err)
	}
	firstDigest, err := first.Digest()
	if err != nil {
		t.Fatal(err)
	}
	moved := registrytest.Image(t, layer(t))

	written, goOn := make(chan struct{}), make(chan struct{})
	var once sync.Once
	gcHook.SetAfter(t, func(_ context.Context, method, path string, err error) {
		if method == "PutContent" && path == layout.TagCurrentPath(repo, tag) && err == nil {
			once.Do(func() {
				close(written)
				<-goOn
			})
		}
	})
	pushed := make(chan error, 1)
	go func() {
		pushed <- remote.Write(g.Ref(t, repo+":"+tag), moved,
			append(g.Remote(t), remote.WithRetryBackoff(remote.Backoff{Duration: time.Millisecond, Steps: 1}))...)
	}()
	<-written

	// The deleter: fence, delete the keys its listing saw (the current
	// link and the first push's index entry), release.
	tr := g.Server.Env().Tracker
	f, err := tr.FenceTag(ctx, repo, tag, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{layout.TagCurrentPath(repo, tag), layout.TagIndexPath(repo, tag, digest.Digest(firstDigest.String()))} {
		if err := g.raw.Delete(ctx, p); err != nil {
			t.Fatalf("delete %s: %v", p, err)
		}
	}
	if err := tr.Release(ctx, f); err != nil {
		t.Fatal(err)
	}
	close(goOn)

	refusedThenRetried(t, g, repo+":"+tag, <-pushed, moved)
}

// refusedThenRetried fails unless pushErr is a 503 after which the tag list
// of ref's repository does not name ref's tag, and a push of img to ref
// then tags it.
func refusedThenRetried(t *testing.T, g *gcRegistry, ref string, pushErr error, img v1.Image) {
	t.Helper()
	var te *transport.Error
	if !errors.As(pushErr, &te) || te.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("push of %s: %v, want 503", ref, pushErr)
	}
	repo, tag, _ := strings.Cut(ref, ":")
	tags, err := remote.List(g.Repo(t, repo), g.Remote(t)...)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(tags, tag) {
		_, statErr := g.raw.Stat(context.Background(), layout.TagCurrentPath(repo, tag))
		t.Fatalf("the tag list names %s after its write was refused (current link: %v): a tag no pull can fetch", tag, statErr)
	}
	gcHook.Set(t, nil)
	if err := remote.Write(g.Ref(t, ref), img, g.Remote(t)...); err != nil {
		t.Fatalf("retry of the push: %v", err)
	}
	registrytest.AssertPullable(t, g.Registry, ref)
}

// A push of a new tag refused before its current link is written: the
// manifest's revision link is gone between the tag's index entry (written
// first) and the check before the current link (as a collect that ran
// while the request stalled would leave it). The push answers 503; before,
// the index entry stayed and the tag list named a tag no pull can fetch.
// The refused push removes the directory; its retry tags.
func TestE2ETagWriteRefusedBeforeItsCurrentLinkLeavesNoTagDirectory(t *testing.T) {
	g := startRetention(t, nil)
	ctx := context.Background()
	const repo, tag = "svc/app", "new"
	img := registrytest.Image(t, layer(t))
	h, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	m := digest.Digest(h.String())

	// armed once the manifest's revision link is written; the next look
	// at it (the checks between it and the tag's current link) finds it gone
	var armed atomic.Bool
	var collected sync.Once
	gcHook.SetAfter(t, func(_ context.Context, method, path string, err error) {
		if method == "PutContent" && path == layout.RevisionLinkPath(repo, m) && err == nil {
			armed.Store(true)
		}
	})
	gcHook.Set(t, func(_ context.Context, method, path string) error {
		if armed.Load() && method != "PutContent" && path == layout.RevisionLinkPath(repo, m) {
			collected.Do(func() {
				if err := g.raw.Delete(ctx, path); err != nil {
					t.Errorf("delete %s: %v", path, err)
				}
			})
		}
		return nil
	})
	err = remote.Write(g.Ref(t, repo+":"+tag), img,
		append(g.Remote(t), remote.WithRetryBackoff(remote.Backoff{Duration: time.Millisecond, Steps: 1}))...)
	refusedThenRetried(t, g, repo+":"+tag, err, img)
}

// A tag directory left without its current link (a tag write or delete
// that failed half-way under storage faults) is what `registry linkdb
// verify` reports as dangling_tag, and its remedy works: a tag DELETE
// through the registry removes the directory, so the tag list stops
// naming a tag nobody can pull, and verify is clean again.
func TestE2EDanglingTagIsReportedAndItsRemedyWorks(t *testing.T) {
	g := startRetention(t, nil)
	ctx := context.Background()
	const repo, tag = "left/app", "v1"
	if err := remote.Write(g.Ref(t, repo+":"+tag), registrytest.Image(t, layer(t)), g.Remote(t)...); err != nil {
		t.Fatal(err)
	}
	if err := g.raw.Delete(ctx, layout.TagCurrentPath(repo, tag)); err != nil {
		t.Fatal(err)
	}
	if tags, err := remote.List(g.Repo(t, repo), g.Remote(t)...); err != nil || !slices.Contains(tags, tag) {
		t.Fatalf("tag list %v (%v): the dangling directory should still be listed, as Distribution lists it", tags, err)
	}
	rep, err := linkdb.Verify(ctx, g.raw, linkdb.VerifyOptions{})
	if err != nil || rep.Counts[linkdb.DanglingTag] != 1 || rep.ExitCode != linkdb.ExitBroken {
		t.Fatalf("verify: %v, counts %v, exit %d; want one dangling_tag, exit %d", err, rep.Counts, rep.ExitCode, linkdb.ExitBroken)
	}
	resp := g.Do(t, http.MethodDelete, "/v2/"+repo+"/manifests/"+tag, nil)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("DELETE of the dangling tag: %d, want 202", resp.StatusCode)
	}
	if tags, err := remote.List(g.Repo(t, repo), g.Remote(t)...); err != nil || slices.Contains(tags, tag) {
		t.Fatalf("tag list after the DELETE: %v (%v)", tags, err)
	}
	if rep, err = linkdb.Verify(ctx, g.raw, linkdb.VerifyOptions{}); err != nil || rep.Counts[linkdb.DanglingTag] != 0 {
		t.Fatalf("verify after the DELETE: %v, counts %v", err, rep.Counts)
	}
}
