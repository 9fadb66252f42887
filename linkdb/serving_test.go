package linkdb

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/storage"
)

// The migration as an operator runs it: data pushed by an upstream registry,
// then the registry restarted with the middleware, then rebuilds running
// while clients push, mount and delete through the middleware. Afterwards no
// forward link may lack its reverse link.
func TestRebuildWhileServingThroughTheMiddleware(t *testing.T) {
	if testing.Short() {
		t.Skip("pushes through a registry for a few seconds")
	}
	const window = 2 * time.Second
	mr := miniredis.RunT(t)
	upstream := registrytest.Start(t)
	for i := range 4 {
		registrytest.PushImage(t, upstream, fmt.Sprintf("old%d:v1", i), 2)
	}
	r := registrytest.Start(t, registrytest.WithRootDirectory(upstream.Root),
		registrytest.WithStorageMiddleware("reclaim", map[string]any{
			"redis":  map[string]any{"addrs": []any{mr.Addr()}},
			"window": window.String(),
			"dedup":  "10ms",
		}))
	// The middleware starts its recording epoch when it is built; fences are
	// refused until it has recorded for a full window.
	registrytest.PushImage(t, r, "warmup:v1", 1)
	time.Sleep(window + 200*time.Millisecond)

	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { client.Close() })
	tr, err := storage.NewTracker(client, storage.TrackerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d := fsDriver(r.Root)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		trafficDone, afterTraffic atomic.Int32
		mu                        sync.Mutex
		rebuildErr                error
		rebuilds                  int
	)
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		for ctx.Err() == nil {
			after := trafficDone.Load() == 1
			_, err := Rebuild(ctx, d, RebuildOptions{Workers: 2, Fencer: TrackerFencer(tr, window, time.Minute), MinAge: -1})
			if ctx.Err() != nil {
				return
			}
			mu.Lock()
			rebuilds++
			if err != nil && rebuildErr == nil {
				rebuildErr = err
			}
			mu.Unlock()
			if after {
				afterTraffic.Add(1)
			}
		}
	}()

	// Traffic through the middleware while rebuilds run.
	for i := range 6 {
		repo := fmt.Sprintf("new%d", i%3)
		img := registrytest.PushImage(t, r, fmt.Sprintf("%s:v%d", repo, i), 2)
		layers, _ := img.Layers()
		l0, _ := layers[0].Digest()
		registrytest.MountBlob(t, r, repo, fmt.Sprintf("old%d", i%4), l0)
		// delete a layer link of an old repository (a forward link delete
		// the middleware mirrors), and a manifest
		old := fmt.Sprintf("old%d", i%4)
		if i < 4 {
			oldImg := registrytest.PushImage(t, r, old+":tmp", 1)
			ls, _ := oldImg.Layers()
			ld, _ := ls[0].Digest()
			resp := r.Do(t, http.MethodDelete, "/v2/"+old+"/blobs/"+ld.String(), nil)
			resp.Body.Close()
			if resp.StatusCode != http.StatusAccepted {
				t.Fatalf("delete layer link: %s", resp.Status)
			}
			md := registrytest.Describe(t, oldImg).Digest
			resp = r.Do(t, http.MethodDelete, "/v2/"+old+"/manifests/"+md.String(), nil)
			resp.Body.Close()
			if resp.StatusCode != http.StatusAccepted {
				t.Fatalf("delete manifest: %s", resp.Status)
			}
		}
	}
	// One more rebuild that starts after the traffic, then stop.
	trafficDone.Store(1)
	for afterTraffic.Load() == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-exited
	mu.Lock()
	if rebuildErr != nil {
		t.Fatalf("rebuild: %v", rebuildErr)
	}
	t.Logf("%d rebuilds", rebuilds)
	mu.Unlock()

	rep := verify(t, d)
	if rep.Counts[MissingReverse] != 0 || rep.Counts[Corrupt] != 0 || rep.Counts[BrokenForward] != 0 {
		t.Fatalf("after rebuilds raced traffic: %+v\n%+v", rep.Counts, rep.Findings)
	}
	if rep.CompleteSince == nil {
		t.Error("no marker")
	}
	t.Logf("verify: exit %d %+v, %d forward links", rep.ExitCode, rep.Counts, rep.ForwardLinks)
}
