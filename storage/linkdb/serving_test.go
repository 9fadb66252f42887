package linkdb_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/opencontainers/go-digest"
	"github.com/redis/go-redis/v9"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/redisstate"
	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/linkdb"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

// The "linkdbhook" storage middleware, listed below "reclaim", lets a test
// fail a driver call of the serving registry.
var servingHook = storagetest.RegisterHook("linkdbhook")

// The migration as an operator runs it: data pushed by an upstream registry,
// then the registry restarted with the middleware, then a rebuild while
// clients push, mount and delete through the middleware. The race it must
// survive: rebuild removes a stale reverse link (its forward link is gone)
// while a client re-creates that forward link; if the client's reverse and
// forward writes land between rebuild's re-check and its delete, the
// forward link is left without its reverse link, and GC may later delete a
// referenced blob. The protection is the link's GC fence, which rebuild
// holds from before the re-check until after the delete, and which makes
// the middleware refuse the re-link meanwhile.
//
// Hooks park the rebuild at the points that matter while the test's clients
// act, and every forward link must have its reverse link right after that
// rebuild, with no rebuild after the traffic (which would add any missing
// reverse link back and hide the race).
func TestRebuildWhileServingThroughTheMiddleware(t *testing.T) {
	if testing.Short() {
		t.Skip("pushes through two registries")
	}
	s := newServing(t)
	// An upstream link the rebuild reads (repositories phase) and a client
	// deletes before the rebuild writes its reverse link.
	readLink := layout.LayerLinkPath("old0", layerDigest(t, s.old[0], 0))
	rb := startParkedRebuild(t, s, readLink)

	rb.park(t, "read "+readLink)
	del(t, s.r, "/v2/old0/blobs/"+layerDigest(t, s.old[0], 0).String())
	relinkBlob, target := s.leaveStaleReverseLink(t, rb)
	s.pushAndDelete(t)
	// The window passes: every link the clients touched may be fenced now.
	s.advance(2 * servingWindow)
	rb.resume()

	// Blob phase: the rebuild holds the fence on relinkTo's link, re-checked
	// that the forward link is absent, and is about to remove the reverse
	// link. The client mounts the blob again right now.
	rb.park(t, "remove stale "+target)
	status := registrytest.TryMountBlob(t, s.r, relinkFrom, relinkTo, relinkBlob)
	rb.resume()
	res := rb.wait(t)
	if status == http.StatusAccepted {
		// Refused (the mount fell back to an upload): the client retries.
		registrytest.MountBlob(t, s.r, relinkFrom, relinkTo, relinkBlob)
	}
	checkServedRebuild(t, s, res, status)
}

// servingWindow is the protection window of the serving registry.
const servingWindow = time.Hour

// The link a client deletes (its reverse link delete fails, leaving it
// stale) and re-creates (a mount) while the rebuild removes that stale
// reverse link.
const relinkFrom, relinkTo = "new0", "old1"

// serving is an upstream registry's storage, with old images, now served
// by a registry with the middleware, on a miniredis whose clock the test
// moves by hand: no waiting out windows.
type serving struct {
	r   *registrytest.Registry
	mr  *miniredis.Miniredis
	now time.Time
	tr  *redisstate.Tracker
	old []v1.Image
}

func newServing(t *testing.T) *serving {
	s := &serving{mr: miniredis.RunT(t), now: time.Now()}
	s.mr.SetTime(s.now)
	upstream := registrytest.Start(t)
	for i := range 3 {
		s.old = append(s.old, registrytest.PushImage(t, upstream, fmt.Sprintf("old%d:v1", i), 2))
	}
	s.r = registrytest.Start(t, registrytest.WithRootDirectory(upstream.Root),
		registrytest.WithStorageMiddleware("linkdbhook", nil),
		registrytest.WithStorageMiddleware("reclaim", map[string]any{
			"redis":  map[string]any{"addrs": []any{s.mr.Addr()}},
			"window": servingWindow.String(),
			// a refused write fails at once: the test needs the refusal, not the wait
			"fencewait": "1ms",
		}))
	client := redis.NewClient(&redis.Options{Addr: s.mr.Addr()})
	t.Cleanup(func() { client.Close() })
	var err error
	if s.tr, err = redisstate.NewTracker(client, redisstate.TrackerOptions{}); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *serving) advance(d time.Duration) { s.now = s.now.Add(d); s.mr.SetTime(s.now) }

// leaveStaleReverseLink pushes relinkFrom, mounts its first layer into
// relinkTo and deletes it there with the reverse link delete failing: a
// stale reverse link (a leak) for the rebuild's blob phase to remove. It
// tells rb the link, and returns the blob and the forward link path.
func (s *serving) leaveStaleReverseLink(t *testing.T, rb *parkedRebuild) (v1.Hash, string) {
	img := registrytest.PushImage(t, s.r, relinkFrom+":v1", 2)
	blob := layerHash(t, img, 0)
	target := layout.LayerLinkPath(relinkTo, digest.Digest(blob.String()))
	rb.relinkAt(target)
	s.advance(time.Second)
	registrytest.MountBlob(t, s.r, relinkFrom, relinkTo, blob)
	s.advance(time.Second)
	reverseDir := path.Dir(layout.ReverseLinkPath(digest.Digest(blob.String()), relinkTo, reclaim.LinkLayer))
	var failed sync.Once
	servingHook.Set(t, func(_ context.Context, m, p string) error {
		var err error
		if m == "Delete" && p == reverseDir {
			failed.Do(func() { err = errors.New("injected: reverse-link delete fails") })
		}
		return err
	})
	del(t, s.r, "/v2/"+relinkTo+"/blobs/"+blob.String())
	return blob, target
}

// pushAndDelete pushes an image into a repository the rebuild has listed,
// and deletes it again.
func (s *serving) pushAndDelete(t *testing.T) {
	tmp := registrytest.PushImage(t, s.r, "old2:tmp", 1)
	s.advance(time.Second)
	del(t, s.r, "/v2/old2/manifests/"+registrytest.Describe(t, tmp).Digest.String())
	del(t, s.r, "/v2/old2/blobs/"+layerHash(t, tmp, 0).String())
}

// checkServedRebuild checks the storage right after the traffic, with no
// rebuild since.
func checkServedRebuild(t *testing.T, s *serving, res *linkdb.RebuildResult, mountStatus int) {
	t.Helper()
	rep := verify(t, fsDriver(s.r.Root))
	if rep.Counts[linkdb.MissingReverse] != 0 || rep.Counts[linkdb.Corrupt] != 0 || rep.Counts[linkdb.BrokenForward] != 0 {
		t.Fatalf("forward links without reverse links after a rebuild raced the traffic (in-rebuild mount: %d): %+v\n%+v", mountStatus, rep.Counts, rep.Findings)
	}
	if mountStatus != http.StatusAccepted {
		t.Errorf("the mount during the stale removal answered %d, want 202 (refused by the fence)", mountStatus)
	}
	if !res.Complete || rep.CompleteSince == nil {
		t.Error("no marker")
	}
	if res.StaleRemoved < 2 {
		t.Errorf("removed %d stale reverse links, want both forced ones: %+v", res.StaleRemoved, res)
	}
	t.Logf("rebuild: %d forward links, %d reverse added, %d stale removed; verify: exit %d %+v",
		res.ForwardLinks, res.ReverseAdded, res.StaleRemoved, rep.ExitCode, rep.Counts)
}

// parkedRebuild is a rebuild that parks at the points the test names
// until the test, which drives the clients meanwhile, lets it go on: after
// it read readLink, and before it removes the stale reverse link at the
// relink path.
type parkedRebuild struct {
	at      chan string
	release chan struct{}
	done    chan parkedResult

	mu          sync.Mutex
	lastMissing string // the forward link the rebuild last found absent
	relinkPath  string
	readParked  bool
}

type parkedResult struct {
	res *linkdb.RebuildResult
	err error
}

func startParkedRebuild(t *testing.T, s *serving, readLink string) *parkedRebuild {
	rb := &parkedRebuild{at: make(chan string), release: make(chan struct{}), done: make(chan parkedResult, 1)}
	d := &storagetest.HookDriver{StorageDriver: fsDriver(s.r.Root),
		After: func(_ context.Context, m, p string, err error) {
			switch {
			case m == "Stat" && layout.IsNotFound(err):
				rb.mu.Lock()
				rb.lastMissing = p
				rb.mu.Unlock()
			case m == "GetContent" && p == readLink && err == nil:
				rb.mu.Lock()
				first := !rb.readParked
				rb.readParked = true
				rb.mu.Unlock()
				if first {
					rb.here("read " + p)
				}
			}
		}}
	opts := linkdb.RebuildOptions{Workers: 1, Fencer: linkdb.TrackerFencer(s.tr, servingWindow, time.Minute), MinAge: -1}.BeforeDelete(func() {
		rb.mu.Lock()
		victim, target := rb.lastMissing, rb.relinkPath
		rb.mu.Unlock()
		if victim != "" && victim == target {
			rb.here("remove stale " + victim)
		}
	})
	go func() {
		res, err := linkdb.Rebuild(context.Background(), d, opts)
		rb.done <- parkedResult{res, err}
	}()
	return rb
}

func (rb *parkedRebuild) here(name string) { rb.at <- name; <-rb.release }

func (rb *parkedRebuild) relinkAt(p string) {
	rb.mu.Lock()
	rb.relinkPath = p
	rb.mu.Unlock()
}

// park waits for the rebuild to park at want.
func (rb *parkedRebuild) park(t *testing.T, want string) {
	t.Helper()
	select {
	case at := <-rb.at:
		if at != want {
			t.Fatalf("rebuild parked at %q, want %q", at, want)
		}
	case res := <-rb.done:
		t.Fatalf("rebuild finished (%v) without reaching %q: the interleaving was not forced", res.err, want)
	}
}

func (rb *parkedRebuild) resume() { rb.release <- struct{}{} }

func (rb *parkedRebuild) wait(t *testing.T) *linkdb.RebuildResult {
	t.Helper()
	res := <-rb.done
	if res.err != nil {
		t.Fatalf("rebuild: %v", res.err)
	}
	return res.res
}

func layerHash(t *testing.T, img v1.Image, i int) v1.Hash {
	t.Helper()
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	h, err := ls[i].Digest()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func layerDigest(t *testing.T, img v1.Image, i int) digest.Digest {
	return digest.Digest(layerHash(t, img, i).String())
}

func del(t *testing.T, r *registrytest.Registry, path string) {
	t.Helper()
	resp := r.Do(t, http.MethodDelete, path, nil)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("DELETE %s: %s", path, resp.Status)
	}
}
