package soak

import (
	"context"
	mrand "math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

// soakHook runs a test's code inside chosen driver calls (the "soakhook"
// storage middleware).
var soakHook = storagetest.RegisterHook("soakhook")

// windowRegistry is an in-process registry with the reclaim middleware
// (window w) on a miniredis whose clock the test moves with skipWindow;
// before are storage middlewares listed below reclaim.
func windowRegistry(t *testing.T, w time.Duration, before ...registrytest.Option) (*registrytest.Registry, *miniredis.Miniredis, storagedriver.StorageDriver) {
	t.Helper()
	m := miniredis.RunT(t)
	root, raw := prepareStorage(t)
	opts := append([]registrytest.Option{registrytest.WithRootDirectory(root)}, before...)
	r := registrytest.Start(t, append(opts, registrytest.WithStorageMiddleware("reclaim", map[string]any{
		"window": w.String(), "dedup": "10ms",
		"redis": map[string]any{"addrs": []any{m.Addr()}},
		"gc":    map[string]any{"enabled": true},
	}))...)
	return r, m, raw
}

// TestKeptIndexChildPullableDuringSweep is the index-child failure the soak
// saw twice ("child_missing"): an untagged index nobody pulled for W is
// planned for deletion with its children; a client pulls the index after the
// plan and before the sweep, so the index's fence is refused and it is kept,
// and with it its children. A fenced manifest reads as "unknown", so a child
// of a kept index must not be fenced before its parents are deleted: the
// test pulls the child whenever the collector holds its fence.
func TestKeptIndexChildPullableDuringSweep(t *testing.T) {
	const w = time.Second
	r, m, _ := windowRegistry(t, w, registrytest.WithStorageMiddleware("soakhook", nil))
	ctx := context.Background()
	index, child := pushUntaggedIndex(ctx, t, r)
	skipWindow(t, m, w) // nobody touched anything for W

	p := &childProbe{r: r, m: m, index: index, child: child,
		childFence: "reclaim:{" + child.String() + "}:f:m:fw/app"}
	soakHook.Set(t, func(ctx context.Context, m, path string) error { p.before(ctx, m, path); return nil })
	rep, err := collectFull(ctx, r, "fw/app")
	soakHook.Set(t, nil)
	after := p.get(child)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil || rep.code != http.StatusOK || p.phase != 1 || p.indexCode != http.StatusOK {
		t.Fatalf("interleaving not reached: phase %d, index pull %d; collect %v %+v", p.phase, p.indexCode, err, rep)
	}
	if len(rep.ManifestsDeleted) != 0 {
		t.Fatalf("the index was pulled before its fence, yet manifests were deleted: %+v", rep)
	}
	if len(p.childBad) > 0 {
		t.Errorf("pulls of child %s of a kept index answered %v while the collector fenced it (%d pulls)", child, p.childBad, p.childPulls)
	}
	if after != http.StatusOK {
		t.Errorf("child %s of the kept index answers %d after the collect", child, after)
	}
}

// pushUntaggedIndex pushes a two-platform index as fw/app:t and an image as
// fw/app:other, then deletes the tag t. It returns the index and its first
// child.
func pushUntaggedIndex(ctx context.Context, t *testing.T, r *registrytest.Registry) (index, child v1.Hash) {
	t.Helper()
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
	if code := del(ctx, r, "/v2/fw/app/manifests/t"); code != http.StatusAccepted {
		t.Fatalf("untag: %d", code)
	}
	index, _ = idx.Digest()
	child, _ = a.Digest()
	return index, child
}

// childProbe is the storage hook of TestKeptIndexChildPullableDuringSweep:
// it pulls the index once the plan is made, then the child whenever the
// collector holds the child's fence.
type childProbe struct {
	r            *registrytest.Registry
	m            *miniredis.Miniredis
	index, child v1.Hash
	childFence   string

	mu         sync.Mutex
	phase      int
	pulling    bool
	indexCode  int
	childPulls int
	childBad   []int
}

// get GETs a manifest of fw/app and returns the status (0 on failure).
func (p *childProbe) get(d v1.Hash) int {
	resp, err := send(context.Background(), p.r, http.MethodGet, "/v2/fw/app/manifests/"+d.String(),
		map[string]string{"Accept": string(types.OCIImageIndex) + "," + string(types.OCIManifestSchema1)}, nil)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func (p *childProbe) before(_ context.Context, method, path string) {
	p.mu.Lock()
	switch {
	case p.pulling:
		// the hook's own pull: no recursion
		p.mu.Unlock()
	case p.phase == 0 && method == "Stat" && strings.HasSuffix(path, "/data"):
		// the plan stats the blobs it would delete: the manifest
		// decisions are made; a client pulls the index now
		p.phase, p.pulling = 1, true
		p.mu.Unlock()
		code := p.get(p.index)
		p.mu.Lock()
		p.indexCode, p.pulling = code, false
		p.mu.Unlock()
	case p.phase == 1 && p.childPulls < 50 && p.m.Exists(p.childFence):
		// the collector holds a fence on the child of the kept
		// index: a client pulls the child now
		p.pulling = true
		p.childPulls++
		p.mu.Unlock()
		code := p.get(p.child)
		p.mu.Lock()
		if code != http.StatusOK {
			p.childBad = append(p.childBad, code)
		}
		p.pulling = false
		p.mu.Unlock()
	default:
		p.mu.Unlock()
	}
}

func newRand() *mrand.Rand { return mrand.New(mrand.NewPCG(7, 7)) }
