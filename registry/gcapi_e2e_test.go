package registry_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
	ggcrv1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/gc/collector"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/linkdb"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

// e2eWindow is the protection window of the test registries: long enough
// for a push to finish inside it, short enough to wait out.
const e2eWindow = time.Second

// gcHook lets a test run code inside chosen driver calls (the "gchook"
// storage middleware, listed below "reclaim").
var gcHook = storagetest.RegisterHook("gchook")

func setHook(t *testing.T, h func(ctx context.Context, method, path string) error) { gcHook.Set(t, h) }

type gcRegistry struct {
	*registrytest.Registry
	raw storagedriver.StorageDriver
}

func reclaimOptions(t testing.TB, window time.Duration, redisAddr string) map[string]any {
	opts := map[string]any{
		"window": window.String(),
		"dedup":  "10ms",
		"gc":     map[string]any{"enabled": true},
	}
	if redisAddr == "" {
		redisAddr = os.Getenv("RECLAIM_TEST_REDIS_ADDR")
	}
	if redisAddr != "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		opts["redis"] = map[string]any{"addrs": []any{redisAddr}}
		opts["prefix"] = "gce2e-" + hex.EncodeToString(b[:]) + ":"
	}
	return opts
}

// startGC starts an in-process registry with the reclaim middleware (and
// the test hook below it), marks its (empty) link database complete, and
// waits until the tracker has recorded for a full window.
func startGC(t *testing.T, opts ...registrytest.Option) *gcRegistry {
	t.Helper()
	base := []registrytest.Option{
		registrytest.WithStorageMiddleware("gchook", nil),
		registrytest.WithStorageMiddleware("reclaim", reclaimOptions(t, e2eWindow, "")),
	}
	g := completeGC(t, registrytest.Start(t, append(base, opts...)...))
	g.settle(t)
	return g
}

// completeGC wraps r, which started empty with the reclaim middleware, and
// marks its link database complete: it has been from the start.
func completeGC(t testing.TB, r *registrytest.Registry) *gcRegistry {
	t.Helper()
	raw := rawDriver(t, r)
	if err := linkdb.MarkLinkDBComplete(t.Context(), raw, time.Now()); err != nil {
		t.Fatal(err)
	}
	return &gcRegistry{Registry: r, raw: raw}
}

// settle makes everything done so far older than the window: it moves
// the Redis clock the window is timed by and the clock of the requests in
// flight (registrytest.Registry.Age), by the window and a margin, as
// sleeping through them used to.
func (g *gcRegistry) settle(t testing.TB) {
	t.Helper()
	g.Age(t, e2eWindow+200*time.Millisecond)
}

// post sends an empty POST to path as g's user.
func (g *gcRegistry) post(t testing.TB, path string) (int, []byte) {
	t.Helper()
	code, _, body := g.send(t, http.MethodPost, path, "")
	return code, body
}

func (g *gcRegistry) collectRaw(t testing.TB, repo string, dry bool) (int, []byte) {
	t.Helper()
	return g.post(t, fmt.Sprintf("/gc/v1/repositories/%s/collect?dry_run=%v", repo, dry))
}

func decodeReport(t testing.TB, b []byte) *collector.Report {
	t.Helper()
	var rep collector.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, b)
	}
	return &rep
}

// collect runs a dry run (which must change nothing), then a real run,
// which must delete exactly what the dry run announced; it checks the link
// database afterwards.
func (g *gcRegistry) collect(t testing.TB, repo string) *collector.Report {
	t.Helper()
	before := g.tree(t)
	code, body := g.collectRaw(t, repo, true)
	if code != http.StatusOK {
		t.Fatalf("dry run: %d %s", code, body)
	}
	dry := decodeReport(t, body)
	if !dry.DryRun {
		t.Fatal("dry run report says dry_run=false")
	}
	if after := g.tree(t); after != before {
		t.Fatalf("dry run changed storage:\n%s", diffLines(before, after))
	}
	code, body = g.collectRaw(t, repo, false)
	if code != http.StatusOK {
		t.Fatalf("collect: %d %s", code, body)
	}
	rep := decodeReport(t, body)
	for _, pair := range [][2][]digest.Digest{{dry.ManifestsDeleted, rep.ManifestsDeleted},
		{dry.LayersUnlinked, rep.LayersUnlinked}, {dry.BlobsDeleted, rep.BlobsDeleted}} {
		if !sameSet(pair[0], pair[1]) {
			t.Fatalf("dry run announced %v, real run did %v", pair[0], pair[1])
		}
	}
	if dry.BytesFreed != rep.BytesFreed {
		t.Fatalf("bytes: dry %d, real %d", dry.BytesFreed, rep.BytesFreed)
	}
	g.checkLinks(t)
	return rep
}

// tree lists every file under the storage root with its size.
func (g *gcRegistry) tree(t testing.TB) string {
	t.Helper()
	var lines []string
	err := filepath.Walk(g.Root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if !fi.IsDir() && !strings.Contains(p, "/_uploads/") {
			lines = append(lines, fmt.Sprintf("%s %d", strings.TrimPrefix(p, g.Root), fi.Size()))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// checkLinks walks the storage: every forward link has its reverse link
// (invariant 2) and every reverse link its forward link (GC leaves no
// stale one behind).
func (g *gcRegistry) checkLinks(t testing.TB) {
	t.Helper()
	ctx := t.Context()
	links := linkdb.NewReverseLinks(g.raw)
	err := g.raw.Walk(ctx, layout.RootPath, func(fi storagedriver.FileInfo) error {
		if fi.IsDir() {
			return nil
		}
		p := layout.Classify(fi.Path())
		switch p.Kind {
		case layout.PathLayerLink, layout.PathRevisionLink:
			k := reclaim.LinkLayer
			if p.Kind == layout.PathRevisionLink {
				k = reclaim.LinkManifest
			}
			ok, err := links.Has(ctx, p.Digest, reclaim.RepoLink{Repo: p.Repo, Kind: k})
			if err != nil {
				return err
			}
			if !ok {
				t.Errorf("forward link without reverse link: %s", fi.Path())
			}
		case layout.PathReverseLink:
			if _, err := g.raw.Stat(ctx, layout.ForwardLinkPath(p.Repo, p.Digest, p.LinkKind)); err != nil {
				t.Errorf("reverse link without forward link: %s (%v)", fi.Path(), err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// And the link database's own verifier agrees.
	v, err := linkdb.Verify(ctx, g.raw, linkdb.VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v.ExitCode != 0 {
		t.Errorf("linkdb verify: exit %d, findings %+v", v.ExitCode, v.Findings)
	}
}

func diffLines(a, b string) string {
	as, bs := map[string]bool{}, map[string]bool{}
	for _, l := range strings.Split(a, "\n") {
		as[l] = true
	}
	for _, l := range strings.Split(b, "\n") {
		bs[l] = true
	}
	var out []string
	for l := range as {
		if !bs[l] {
			out = append(out, "- "+l)
		}
	}
	for l := range bs {
		if !as[l] {
			out = append(out, "+ "+l)
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

func sameSet(a, b []digest.Digest) bool {
	m := map[digest.Digest]int{}
	for _, d := range a {
		m[d]++
	}
	for _, d := range b {
		m[d]--
	}
	for _, n := range m {
		if n != 0 {
			return false
		}
	}
	return true
}

func contains(ds []digest.Digest, h ggcrv1.Hash) bool {
	for _, d := range ds {
		if d.String() == h.String() {
			return true
		}
	}
	return false
}

func reasonOf(rep *collector.Report, kind reclaim.ObjectKind, h ggcrv1.Hash) string {
	for _, k := range rep.Kept {
		if k.Kind == kind && k.Digest.String() == h.String() {
			return k.Reason.String()
		}
	}
	return ""
}

func untag(t testing.TB, g *gcRegistry, repo, tag string) {
	t.Helper()
	resp := g.Do(t, http.MethodDelete, "/v2/"+repo+"/manifests/"+tag, nil)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("untag %s:%s: %d", repo, tag, resp.StatusCode)
	}
}

func layer(t testing.TB) ggcrv1.Layer {
	t.Helper()
	l, err := random.Layer(1024, types.OCILayer)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func push(t testing.TB, g *gcRegistry, ref string, img ggcrv1.Image) ggcrv1.Hash {
	t.Helper()
	if err := remote.Write(g.Ref(t, ref), img, g.Remote(t)...); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func digestOf(t *testing.T, l interface{ Digest() (ggcrv1.Hash, error) }) ggcrv1.Hash {
	t.Helper()
	d, err := l.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func configDigest(t *testing.T, img ggcrv1.Image) ggcrv1.Hash {
	t.Helper()
	d, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestE2ESharedBaseAndTagOverwrite(t *testing.T) {
	g := startGC(t)
	base := layer(t)
	a1 := registrytest.Image(t, base, layer(t))
	a2 := registrytest.Image(t, base, layer(t))
	b := registrytest.Image(t, base, layer(t))
	a1d := push(t, g, "team/a:v1", a1)
	push(t, g, "team/b:v1", b)
	a2d := push(t, g, "team/a:v1", a2) // overwrite: a1 is now untagged
	g.settle(t)

	rep := g.collect(t, "team/a")
	a1Layers, _ := a1.Layers()
	a1Unique := digestOf(t, a1Layers[1])
	if !contains(rep.ManifestsDeleted, a1d) || contains(rep.ManifestsDeleted, a2d) {
		t.Fatalf("manifests deleted: %v", rep.ManifestsDeleted)
	}
	for _, h := range []ggcrv1.Hash{a1d, a1Unique, configDigest(t, a1)} {
		if !contains(rep.BlobsDeleted, h) {
			t.Errorf("blob %s not deleted: %v", h, rep.BlobsDeleted)
		}
	}
	if contains(rep.LayersUnlinked, digestOf(t, base)) {
		t.Fatal("base layer unlinked while a2 uses it")
	}
	if rep.BytesFreed <= 0 {
		t.Fatalf("bytes freed %d", rep.BytesFreed)
	}
	registrytest.AssertPullable(t, g.Registry, "team/a:v1")
	registrytest.AssertPullable(t, g.Registry, "team/b:v1")
	if s := registrytest.ManifestStatus(t, g.Registry, "team/a@"+a1d.String()); s != http.StatusNotFound {
		t.Fatalf("deleted manifest answers %d", s)
	}
	if s := registrytest.BlobStatus(t, g.Registry, "team/a", a1Unique); s != http.StatusNotFound {
		t.Fatalf("deleted blob answers %d", s)
	}

	// Remove team/a's last tag: the base goes from team/a, but its blob
	// stays for team/b.
	untag(t, g, "team/a", "v1")
	g.settle(t)
	rep = g.collect(t, "team/a")
	if !contains(rep.LayersUnlinked, digestOf(t, base)) || contains(rep.BlobsDeleted, digestOf(t, base)) {
		t.Fatalf("base: unlinked=%v deleted=%v", rep.LayersUnlinked, rep.BlobsDeleted)
	}
	if r := reasonOf(rep, reclaim.KindBlob, digestOf(t, base)); r != "linked_elsewhere" {
		t.Fatalf("base blob reason %q", r)
	}
	registrytest.AssertPullable(t, g.Registry, "team/b:v1")
}

func TestE2EIndexChildrenAndReferrers(t *testing.T) {
	g := startGC(t)
	idx := registrytest.PushIndex(t, g.Registry, "multi/arch:v1")
	idxDesc := registrytest.Describe(t, idx)
	art := registrytest.PushArtifact(t, g.Registry, "multi/arch", idxDesc)
	g.settle(t)

	rep := g.collect(t, "multi/arch")
	if len(rep.ManifestsDeleted)+len(rep.LayersUnlinked)+len(rep.BlobsDeleted) != 0 {
		t.Fatalf("tagged index lost something: %+v", rep)
	}
	im, _ := idx.IndexManifest()
	for _, c := range im.Manifests {
		if r := reasonOf(rep, reclaim.KindManifest, c.Digest); r != "index_child" {
			t.Errorf("child %s: %q", c.Digest, r)
		}
	}
	if r := reasonOf(rep, reclaim.KindManifest, art.Digest); r != "referrer" {
		t.Errorf("referrer: %q", r)
	}
	if n := referrersCount(t, g, "multi/arch", idxDesc.Digest); n != 1 {
		t.Fatalf("referrers before GC: %d", n)
	}
	registrytest.AssertPullable(t, g.Registry, "multi/arch:v1")

	untag(t, g, "multi/arch", "v1")
	g.settle(t)
	rep = g.collect(t, "multi/arch")
	want := []ggcrv1.Hash{idxDesc.Digest, art.Digest, im.Manifests[0].Digest, im.Manifests[1].Digest}
	for _, h := range want {
		if !contains(rep.ManifestsDeleted, h) {
			t.Errorf("%s not deleted", h)
		}
	}
	// 2 images x (config + 2 layers) + artifact (empty config + 1 blob).
	if len(rep.LayersUnlinked) != 8 {
		t.Errorf("layers unlinked: %d", len(rep.LayersUnlinked))
	}
	if s := registrytest.ManifestStatus(t, g.Registry, "multi/arch@"+art.Digest.String()); s != http.StatusNotFound {
		t.Errorf("referrer still answers %d", s)
	}
	// The referrers index lost its entry with the referrer.
	if n := referrersCount(t, g, "multi/arch", idxDesc.Digest); n != 0 {
		t.Errorf("referrers after GC: %d", n)
	}
}

// referrersCount lists the referrers API; a 404 counts as none.
func referrersCount(t *testing.T, g *gcRegistry, repo string, subject ggcrv1.Hash) int {
	t.Helper()
	resp := g.Do(t, http.MethodGet, "/v2/"+repo+"/referrers/"+subject.String(), nil)
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return 0
	}
	var list struct {
		Manifests []json.RawMessage `json:"manifests"`
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("referrers: status %d", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	return len(list.Manifests)
}

func TestE2ERecentlyPulledUntaggedManifestKept(t *testing.T) {
	g := startGC(t)
	old := push(t, g, "k8s/app:v1", registrytest.Image(t, layer(t)))
	push(t, g, "k8s/app:v1", registrytest.Image(t, layer(t)))
	g.settle(t)
	// A node pulls the old image by digest, as Kubernetes does.
	registrytest.AssertPullable(t, g.Registry, "k8s/app@"+old.String())
	rep := g.collect(t, "k8s/app")
	if r := reasonOf(rep, reclaim.KindManifest, old); r != "recently_accessed" {
		t.Fatalf("pulled manifest: %q (%+v)", r, rep.ManifestsDeleted)
	}
	if len(rep.LayersUnlinked) != 0 {
		t.Fatalf("a kept manifest's layers were unlinked: %v", rep.LayersUnlinked)
	}
	g.settle(t)
	rep = g.collect(t, "k8s/app")
	if !contains(rep.ManifestsDeleted, old) {
		t.Fatalf("after the window the old manifest should go: %+v", rep.Kept)
	}
}

// rawDriver is the filesystem driver below the middleware.
func rawDriver(t testing.TB, r *registrytest.Registry) storagedriver.StorageDriver {
	t.Helper()
	d, err := filesystem.FromParameters(map[string]any{"rootdirectory": r.Root})
	if err != nil {
		t.Fatal(err)
	}
	return d
}
