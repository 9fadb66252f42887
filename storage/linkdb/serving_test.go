package linkdb_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	storagemiddleware "github.com/distribution/distribution/v3/registry/storage/driver/middleware"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/opencontainers/go-digest"
	"github.com/redis/go-redis/v9"

	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/linkdb"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
	"github.com/reclaim-registry/reclaim/storage/tracker"
)

// The "linkdbhook" storage middleware, listed below "reclaim", lets a test
// fail a driver call of the serving registry.
var (
	servingHookMu sync.Mutex
	servingHook   func(ctx context.Context, method, path string) error
)

func init() {
	_ = storagemiddleware.Register("linkdbhook", func(_ context.Context, d storagedriver.StorageDriver, _ map[string]any) (storagedriver.StorageDriver, error) {
		return &storagetest.HookDriver{StorageDriver: d, Before: func(ctx context.Context, m, p string) error {
			servingHookMu.Lock()
			h := servingHook
			servingHookMu.Unlock()
			if h == nil {
				return nil
			}
			return h(ctx, m, p)
		}}, nil
	})
}

func setServingHook(t *testing.T, h func(ctx context.Context, method, path string) error) {
	servingHookMu.Lock()
	servingHook = h
	servingHookMu.Unlock()
	t.Cleanup(func() { servingHookMu.Lock(); servingHook = nil; servingHookMu.Unlock() })
}

// pause parks the rebuild at a named point until the test, which drives
// the clients meanwhile, lets it go on.
type pause struct {
	at     chan string
	resume chan struct{}
}

func (p pause) here(name string) { p.at <- name; <-p.resume }

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
	const window = time.Hour
	mr := miniredis.RunT(t)
	// Redis time (every access record, fence and epoch) is frozen and moved
	// by hand: no waiting out windows.
	now := time.Now()
	mr.SetTime(now)
	advance := func(d time.Duration) { now = now.Add(d); mr.SetTime(now) }

	upstream := registrytest.Start(t)
	var old []v1.Image
	for i := range 3 {
		old = append(old, registrytest.PushImage(t, upstream, fmt.Sprintf("old%d:v1", i), 2))
	}
	r := registrytest.Start(t, registrytest.WithRootDirectory(upstream.Root),
		registrytest.WithStorageMiddleware("linkdbhook", nil),
		registrytest.WithStorageMiddleware("reclaim", map[string]any{
			"redis":  map[string]any{"addrs": []any{mr.Addr()}},
			"window": window.String(),
		}))
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { client.Close() })
	tr, err := tracker.NewTracker(client, tracker.TrackerOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// An upstream link the rebuild reads (phase 1) and a client deletes
	// before the rebuild writes its reverse link.
	readLink := layout.LayerLinkPath("old0", layerDigest(t, old[0], 0))
	// The link a client deletes (its reverse link delete fails, leaving it
	// stale) and re-creates (a mount) while the rebuild removes that stale
	// reverse link.
	const relinkFrom, relinkTo = "new0", "old1"
	var relinkBlob v1.Hash

	p := pause{at: make(chan string), resume: make(chan struct{})}
	var (
		mu          sync.Mutex
		lastMissing string // the forward link the rebuild last found absent
		relinkPath  string // relinkTo's link to relinkBlob
		readParked  bool
	)
	d := &storagetest.HookDriver{StorageDriver: fsDriver(r.Root),
		After: func(_ context.Context, m, path string, err error) {
			switch {
			case m == "Stat" && layout.IsNotFound(err):
				mu.Lock()
				lastMissing = path
				mu.Unlock()
			case m == "GetContent" && path == readLink && err == nil:
				mu.Lock()
				first := !readParked
				readParked = true
				mu.Unlock()
				if first {
					p.here("read " + path)
				}
			}
		}}
	opts := linkdb.RebuildOptions{Workers: 1, Fencer: linkdb.TrackerFencer(tr, window, time.Minute), MinAge: -1}.BeforeDelete(func() {
		mu.Lock()
		victim, target := lastMissing, relinkPath
		mu.Unlock()
		if victim != "" && victim == target {
			p.here("remove stale " + victim)
		}
	})
	type result struct {
		res *linkdb.RebuildResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := linkdb.Rebuild(context.Background(), d, opts)
		done <- result{res, err}
	}()
	park := func(want string) {
		t.Helper()
		select {
		case at := <-p.at:
			if at != want {
				t.Fatalf("rebuild parked at %q, want %q", at, want)
			}
		case res := <-done:
			t.Fatalf("rebuild finished (%v) without reaching %q: the interleaving was not forced", res.err, want)
		}
	}

	// Phase 1: the rebuild has read old0's layer link and not yet written
	// its reverse link.
	park("read " + readLink)
	del(t, r, "/v2/old0/blobs/"+layerDigest(t, old[0], 0).String())
	// Pushes, a mount, deletes, in repositories the rebuild has listed and
	// in a new one, each a second apart (beyond the write grace).
	img := registrytest.PushImage(t, r, relinkFrom+":v1", 2)
	relinkBlob = layerHash(t, img, 0)
	target := layout.LayerLinkPath(relinkTo, digest.Digest(relinkBlob.String()))
	mu.Lock()
	relinkPath = target
	mu.Unlock()
	advance(time.Second)
	registrytest.MountBlob(t, r, relinkFrom, relinkTo, relinkBlob)
	advance(time.Second)
	// The client deletes the mounted link; the middleware removes the
	// forward link, and its reverse-link delete fails: a stale reverse
	// link (a leak), which the rebuild's blob phase will remove.
	reverseDir := layout.ReverseLinksDir(digest.Digest(relinkBlob.String())) + "/" + relinkTo + "/" + string(layout.LinkLayer)
	var failed sync.Once
	setServingHook(t, func(_ context.Context, m, path string) error {
		var err error
		if m == "Delete" && path == reverseDir {
			failed.Do(func() { err = errors.New("injected: reverse-link delete fails") })
		}
		return err
	})
	del(t, r, "/v2/"+relinkTo+"/blobs/"+relinkBlob.String())
	tmp := registrytest.PushImage(t, r, "old2:tmp", 1)
	advance(time.Second)
	del(t, r, "/v2/old2/manifests/"+registrytest.Describe(t, tmp).Digest.String())
	del(t, r, "/v2/old2/blobs/"+layerHash(t, tmp, 0).String())
	// The window passes: every link the clients touched may be fenced now.
	advance(2 * window)
	p.resume <- struct{}{}

	// Phase 2: the rebuild holds the fence on relinkTo's link, re-checked
	// that the forward link is absent, and is about to remove the reverse
	// link. The client mounts the blob again right now.
	park("remove stale " + target)
	status := registrytest.TryMountBlob(t, r, relinkFrom, relinkTo, relinkBlob)
	p.resume <- struct{}{}
	res := <-done
	if res.err != nil {
		t.Fatalf("rebuild: %v", res.err)
	}
	if status == http.StatusAccepted {
		// Refused (the mount fell back to an upload): the client retries.
		registrytest.MountBlob(t, r, relinkFrom, relinkTo, relinkBlob)
	}

	// Right after the traffic, no rebuild since.
	rep := verify(t, fsDriver(r.Root))
	if rep.Counts[linkdb.MissingReverse] != 0 || rep.Counts[linkdb.Corrupt] != 0 || rep.Counts[linkdb.BrokenForward] != 0 {
		t.Fatalf("forward links without reverse links after a rebuild raced the traffic (in-rebuild mount: %d): %+v\n%+v", status, rep.Counts, rep.Findings)
	}
	if status != http.StatusAccepted {
		t.Errorf("the mount during the stale removal answered %d, want 202 (refused by the fence)", status)
	}
	if !res.res.Complete || rep.CompleteSince == nil {
		t.Error("no marker")
	}
	if res.res.StaleRemoved < 2 {
		t.Errorf("removed %d stale reverse links, want both forced ones: %+v", res.res.StaleRemoved, res.res)
	}
	t.Logf("rebuild: %d forward links, %d reverse added, %d stale removed; verify: exit %d %+v",
		res.res.ForwardLinks, res.res.ReverseAdded, res.res.StaleRemoved, rep.ExitCode, rep.Counts)
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
