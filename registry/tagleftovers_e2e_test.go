package registry_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/storage/layout"
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

	pushErr := <-pushed
	var te *transport.Error
	if !errors.As(pushErr, &te) || te.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("push whose tag was deleted after it was written: %v, want 503", pushErr)
	}
	tags, err := remote.List(g.Repo(t, repo), g.Remote(t)...)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(tags, tag) {
		_, statErr := g.raw.Stat(ctx, layout.TagCurrentPath(repo, tag))
		t.Fatalf("the tag list names %s after its write was refused (current link: %v): a tag no pull can fetch", tag, statErr)
	}
	if err := remote.Write(g.Ref(t, repo+":"+tag), moved, g.Remote(t)...); err != nil {
		t.Fatalf("retry of the push: %v", err)
	}
	registrytest.AssertPullable(t, g.Registry, repo+":"+tag)
}
