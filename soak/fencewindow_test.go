package soak

import (
	"context"
	"encoding/json"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"os"
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

// TestKeptIndexChildPullableDuringSweep reproduces, deterministically, the
// index-child failure the soak saw twice ("child_missing"): an untagged
// index nobody pulled for W is planned for deletion with its children; a
// client pulls the index after the plan and before the sweep, so the
// index's fence is refused and it is kept, and with it its children. But
// the sweep fences the whole batch (index and children) before it decides
// the children, and a fenced manifest reads as "unknown": a pull of a child
// of a kept index fails while the collector holds the child's fence.
//
// It documents a bug in gc's sweep (or in the middleware's fenced reads),
// not in the reclaimer; it runs only with RECLAIM_SOAK_KNOWN_BUGS=1 until
// that is fixed, so CI stays meaningful.
func TestKeptIndexChildPullableDuringSweep(t *testing.T) {
	if os.Getenv("RECLAIM_SOAK_KNOWN_BUGS") == "" {
		t.Skip("known bug (gc sweep fences index children before deciding them); set RECLAIM_SOAK_KNOWN_BUGS=1 to run")
	}
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
	var (
		mu                   sync.Mutex
		phase                int
		indexCode, childCode int
	)
	hookMu.Lock()
	hookBefore = func(_ context.Context, method, p string) {
		mu.Lock()
		next := 0
		switch {
		case phase == 0 && method == "Stat" && strings.HasSuffix(p, "/data"):
			// the plan stats the blobs it would delete: the manifest
			// decisions are made; a client pulls the index now
			phase, next = 1, 1
		case phase == 1 && strings.Contains(p, "/_manifests/tags/other/current"):
			// the sweep re-reads tags with its batch fenced: pull a child
			phase, next = 2, 2
		}
		mu.Unlock()
		switch next {
		case 1:
			code := get(id)
			mu.Lock()
			indexCode = code
			mu.Unlock()
		case 2:
			code := get(ad)
			mu.Lock()
			childCode = code
			mu.Unlock()
		}
	}
	hookMu.Unlock()
	t.Cleanup(func() { hookMu.Lock(); hookBefore = nil; hookMu.Unlock() })

	resp := r.Do(t, http.MethodPost, "/gc/v1/repositories/fw/app/collect", nil)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var rep struct {
		ManifestsDeleted []string `json:"manifests_deleted"`
	}
	_ = json.Unmarshal(body, &rep)
	mu.Lock()
	defer mu.Unlock()
	if phase != 2 || indexCode != http.StatusOK {
		t.Fatalf("interleaving not reached: phase %d, index pull %d; collect %d %s", phase, indexCode, resp.StatusCode, body)
	}
	if len(rep.ManifestsDeleted) != 0 {
		t.Fatalf("the index was pulled before its fence, yet manifests were deleted: %s", body)
	}
	if childCode != http.StatusOK {
		t.Errorf("pull of child %s of a kept index answered %d while the collector held its fence", ad, childCode)
	}
}

func newRand() *mrand.Rand { return mrand.New(mrand.NewPCG(7, 7)) }
