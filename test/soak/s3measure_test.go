package soak

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/distribution/distribution/v3/configuration"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
	"github.com/reclaim-registry/reclaim/storage/storagetest/s3test"
)

// collectTargetImages is how many images the measured collect's target
// repository gets, each pushed to the same tag: all but the last are left
// untagged for the collect to delete.
const collectTargetImages = 6

// TestMeasureCollectOnS3 counts, at the S3 HTTP level (a counting proxy
// between the registry process and versitygw), the requests one
// per-repository collect makes, in a bucket of R repositories and again
// of many more. Every repository links a shared base layer and an old base
// the target's untagged images also link, so the collect unlinks a layer R
// other repositories link and asks whether anybody else does. The calls of
// every kind must not grow with R; the keys the lists return are logged
// (one list returns up to 1000, so "anybody else?" lists up to that many).
//
//	go test ./test/soak/ -run TestMeasureCollectOnS3 -v                    (R = 10, 60)
//	RECLAIM_MEASURE=1 go test ./test/soak/ -run TestMeasureCollectOnS3 -v  (R = 10, 300)
func TestMeasureCollectOnS3(t *testing.T) {
	t.Parallel()
	addr := storagetest.RealRedis()
	if addr == "" {
		t.Skipf("needs a real Redis: set %s=host:port", storagetest.RedisAddrEnv)
	}
	if testing.Short() {
		t.Skip("starts versitygw and a registry process")
	}
	sizes := []int{10, 60}
	if os.Getenv("RECLAIM_MEASURE") != "" {
		sizes = []int{10, 300}
	}
	s3 := s3test.StartS3(t)
	counter := s3test.NewS3Counter(t, s3.Endpoint)
	c := newS3Cluster(t, s3, counter.URL, "/measure", []string{addr}, storagetest.RealPrefix(t, addr))
	c.startProcesses(t, 1, reclaimerOff)
	r := c.regs[0]
	ctx := context.Background()
	c.waitTrusted(ctx, t)
	m := newCollectMeasure(t)

	var first collectMeasured
	for i, R := range sizes {
		m.fill(ctx, t, r, R)
		target := fmt.Sprintf("target/r%d", R)
		m.pushTarget(ctx, t, r, target)
		c.waitOutWindow(ctx, t) // every access record is now older than W
		counter.Reset()
		rep, err := collectFull(ctx, r, target)
		got := collectMeasured{R: R, calls: counter.Snapshot()}
		if err != nil || rep.code != 200 {
			t.Fatalf("R=%d: collect %s: %v (%+v)", R, target, err, rep)
		}
		got.manifests, got.unlinked, got.blobs = len(rep.ManifestsDeleted), len(rep.LayersUnlinked), len(rep.BlobsDeleted)
		t.Logf("%s", got)
		if got.manifests != collectTargetImages-1 {
			t.Errorf("R=%d: the collect deleted %d manifests, want the %d untagged", R, got.manifests, collectTargetImages-1)
		}
		if i == 0 {
			first = got
			continue
		}
		for _, grew := range first.grown(got) {
			t.Errorf("a per-repository collect on S3 grew with the repositories in the bucket: %s", grew)
		}
	}
}

// reclaimerOff turns the background reclaimer off: nothing but the
// measured collect may talk to S3.
var reclaimerOff = registrytest.WithConfig(func(cfg *configuration.Configuration) {
	for _, m := range cfg.Middleware["storage"] {
		if m.Name == "reclaim" {
			m.Options["reclaimer"] = map[string]any{"enabled": false}
		}
	}
})

type collectMeasured struct {
	R                          int
	calls                      s3test.S3Calls
	manifests, unlinked, blobs int
}

func (m collectMeasured) String() string {
	return fmt.Sprintf("R=%4d: collect of one repository (%d manifests deleted, %d links removed, %d blobs deleted): %d S3 requests: %s; %d keys listed, %d keys batch-deleted",
		m.R, m.manifests, m.unlinked, m.blobs, m.calls.Total(), m.calls, m.calls.Listed, m.calls.Batched)
}

// grown lists every request kind, and the collect's own result, that
// differs from m at the larger size.
func (m collectMeasured) grown(big collectMeasured) []string {
	var out []string
	kinds := map[string]bool{}
	for k := range m.calls.Ops {
		kinds[k] = true
	}
	for k := range big.calls.Ops {
		kinds[k] = true
	}
	var sorted []string
	for k := range kinds {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	for _, k := range sorted {
		if a, b := m.calls.Ops[k], big.calls.Ops[k]; b > a {
			out = append(out, fmt.Sprintf("%s %d at R=%d, %d at R=%d", k, a, m.R, b, big.R))
		}
	}
	if m.manifests != big.manifests || m.unlinked != big.unlinked || m.blobs != big.blobs {
		out = append(out, fmt.Sprintf("not the same collect: %d/%d/%d at R=%d, %d/%d/%d at R=%d",
			m.manifests, m.unlinked, m.blobs, m.R, big.manifests, big.unlinked, big.blobs, big.R))
	}
	return out
}

// collectMeasure builds the measured registry: R filler repositories that
// each link the shared base and the old base, and a target per size.
type collectMeasure struct {
	base, old v1.Layer
	filled    int
}

func newCollectMeasure(t *testing.T) *collectMeasure {
	base, err1 := random.Layer(layerSize, types.OCILayer)
	old, err2 := random.Layer(layerSize, types.OCILayer)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	return &collectMeasure{base: base, old: old}
}

// measureImage is an OCI image of layers plus a unique layer.
func measureImage(layers ...v1.Layer) (v1.Image, error) {
	unique, err := random.Layer(layerSize, types.OCILayer)
	if err != nil {
		return nil, err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	return mutate.AppendLayers(img, append(layers, unique)...)
}

// fill pushes filler repositories until there are R, four at a time.
func (m *collectMeasure) fill(ctx context.Context, t *testing.T, r *registrytest.Registry, R int) {
	t.Helper()
	work := make(chan int)
	errs := make(chan error, R)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for i := range work {
				errs <- m.push(ctx, r, fmt.Sprintf("fill/r%04d:v1", i), m.base, m.old)
			}
		})
	}
	for i := m.filled; i < R; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	m.filled = R
}

// pushTarget pushes collectTargetImages images to target:latest; all but
// the last link the old base, which the collect then unlinks.
func (m *collectMeasure) pushTarget(ctx context.Context, t *testing.T, r *registrytest.Registry, target string) {
	t.Helper()
	for i := range collectTargetImages {
		layers := []v1.Layer{m.base}
		if i < collectTargetImages-1 {
			layers = append(layers, m.old)
		}
		if err := m.push(ctx, r, target+":latest", layers...); err != nil {
			t.Fatal(err)
		}
	}
}

// push pushes an image of layers and a unique layer as reference.
func (m *collectMeasure) push(ctx context.Context, r *registrytest.Registry, reference string, layers ...v1.Layer) error {
	img, err := measureImage(layers...)
	if err != nil {
		return err
	}
	rf, err := ref(r, reference)
	if err != nil {
		return err
	}
	for attempt := 1; ; attempt++ {
		err = remote.Write(rf, img, remoteOpts(ctx, r)...)
		if err == nil {
			return nil
		}
		if attempt == 3 || !versitygwDirRace(err) {
			return fmt.Errorf("push %s (attempt %d): %w", strings.TrimPrefix(rf.String(), r.Host+"/"), attempt, err)
		}
	}
}

// versitygwDirRace reports the error of versitygw's posix backend when a
// PUT loses a race with a delete in the same directory: the delete of one
// finished upload (go-containerregistry pushes layers in parallel) removes
// the emptied _uploads/ directory between the other PUT's mkdir and its
// link, and versitygw answers 409 ExistingObjectIsDirectory. S3 itself has
// no directories; the setup pushes of a measurement retry it.
func versitygwDirRace(err error) bool {
	return strings.Contains(err.Error(), "ExistingObjectIsDirectory")
}
