package soak

import (
	"context"
	"encoding/json"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	storagemiddleware "github.com/distribution/distribution/v3/registry/storage/driver/middleware"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

var (
	hookMu     sync.Mutex
	hookBefore func(ctx context.Context, method, path string)
)

func init() {
	_ = storagemiddleware.Register("soakhook", func(_ context.Context, d storagedriver.StorageDriver, _ map[string]any) (storagedriver.StorageDriver, error) {
		return &storagetest.HookDriver{StorageDriver: d, Before: func(ctx context.Context, m, p string) error {
			hookMu.Lock()
			h := hookBefore
			hookMu.Unlock()
			if h != nil {
				h(ctx, m, p)
			}
			return nil
		}}, nil
	})
}

// TestKeptIndexChildPullableDuringSweep is the index-child failure the soak
// saw twice ("child_missing"): an untagged index nobody pulled for W is
// planned for deletion with its children; a client pulls the index after the
// plan and before the sweep, so the index's fence is refused and it is kept,
// and with it its children. The sweep once fenced the whole batch (index and
// children) before deciding the children, and a fenced manifest reads as
// "unknown": a pull of a child of a kept index failed while the collector
// held the child's fence. Now a child is fenced only after its parents are
// deleted. The test pulls the child whenever the collector holds its fence.
func TestKeptIndexChildPullableDuringSweep(t *testing.T) {
	const w = time.Second
	m := miniredis.RunT(t)
	root, _ := prepareStorage(t)
	r := registrytest.Start(t, registrytest.WithRootDirectory(root),
		registrytest.WithStorageMiddleware("soakhook", nil),
		registrytest.WithStorageMiddleware("reclaim", map[string]any{
			"window": w.String(), "dedup": "10ms",
			"redis": map[string]any{"addrs": []any{m.Addr()}},
			"gc":    map[string]any{"enabled": true},
		}))
	ctx := context.Background()
	wl, err := newWorkload(&cluster{regs: []*registrytest.Registry{r}}, 1)
	if err != nil {
		t.Fatal(err)
	}
	rng := newRand()
	a, _ := wl.image(rng)
	b, _ := wl.image(rng)
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex),
		mutate.IndexAddendum{Add: a, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
		mutate.IndexAddendum{Add: b, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64"}}})
	rf, _ := ref(r, "fw/app:t")
	if err := remote.WriteIndex(rf, idx, remoteOpts(ctx, r)...); err != nil {
		t.Fatal(err)
	}
	// Another tag in the repository, so that the sweep's re-read of the
	// tags reads a link file (the hook's cue that the batch is fenced).
	other, _ := wl.image(rng)
	orf, _ := ref(r, "fw/app:other")
	if err := remote.Write(orf, other, remoteOpts(ctx, r)...); err != nil {
		t.Fatal(err)
	}
	id, _ := idx.Digest()
	ad, _ := a.Digest()
	if code := del(ctx, r, "/v2/fw/app/manifests/t"); code != http.StatusAccepted {
		t.Fatalf("untag: %d", code)
	}
	time.Sleep(w + 500*time.Millisecond) // nobody touched anything for W

	get := func(d v1.Hash) int {
		req, _ := http.NewRequest(http.MethodGet, r.URL+"/v2/fw/app/manifests/"+d.String(), nil)
		req.Header.Set("Accept", string(types.OCIImageIndex)+","+string(types.OCIManifestSchema1))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	childFence := "reclaim:{" + ad.String() + "}:f:m:fw/app"
	var (
		mu         sync.Mutex
		phase      int
		pulling    bool
		indexCode  int
		childPulls int
		childBad   []int
	)
	hookMu.Lock()
	hookBefore = func(_ context.Context, method, p string) {
		mu.Lock()
		switch {
		case pulling:
			// the hook's own pull: no recursion
			mu.Unlock()
			return
		case phase == 0 && method == "Stat" && strings.HasSuffix(p, "/data"):
			// the plan stats the blobs it would delete: the manifest
			// decisions are made; a client pulls the index now
			phase, pulling = 1, true
			mu.Unlock()
			code := get(id)
			mu.Lock()
			indexCode, pulling = code, false
			mu.Unlock()
			return
		case phase == 1 && childPulls < 50 && m.Exists(childFence):
			// the collector holds a fence on the child of the kept
			// index: a client pulls the child now
			pulling = true
			childPulls++
			mu.Unlock()
			code := get(ad)
			mu.Lock()
			if code != http.StatusOK {
				childBad = append(childBad, code)
			}
			pulling = false
			mu.Unlock()
			return
		}
		mu.Unlock()
	}
	hookMu.Unlock()
	t.Cleanup(func() { hookMu.Lock(); hookBefore = nil; hookMu.Unlock() })

	resp := r.Do(t, http.MethodPost, "/gc/v1/repositories/fw/app/collect?dry_run=false", nil)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var rep struct {
		ManifestsDeleted []string `json:"manifests_deleted"`
	}
	_ = json.Unmarshal(body, &rep)
	hookMu.Lock()
	hookBefore = nil
	hookMu.Unlock()
	after := get(ad)
	mu.Lock()
	defer mu.Unlock()
	if phase != 1 || indexCode != http.StatusOK {
		t.Fatalf("interleaving not reached: phase %d, index pull %d; collect %d %s", phase, indexCode, resp.StatusCode, body)
	}
	if len(rep.ManifestsDeleted) != 0 {
		t.Fatalf("the index was pulled before its fence, yet manifests were deleted: %s", body)
	}
	if len(childBad) > 0 {
		t.Errorf("pulls of child %s of a kept index answered %v while the collector fenced it (%d pulls)", ad, childBad, childPulls)
	}
	if after != http.StatusOK {
		t.Errorf("child %s of the kept index answers %d after the collect", ad, after)
	}
}

func newRand() *mrand.Rand { return mrand.New(mrand.NewPCG(7, 7)) }
