package registrytest_test

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/reclaim-registry/reclaim/registry/registrytest"
)

func TestStartPushPull(t *testing.T) {
	t.Parallel()
	r := registrytest.Start(t)
	img := registrytest.PushImage(t, r, "harness/img:v1", 3)
	want := registrytest.Describe(t, img)

	got := registrytest.AssertPullable(t, r, "harness/img:v1")
	if got.Digest != want.Digest {
		t.Errorf("pulled %s, pushed %s", got.Digest, want.Digest)
	}
	registrytest.AssertPullable(t, r, "harness/img@"+want.Digest.String())

	idx := registrytest.PushIndex(t, r, "harness/idx:v1")
	if got := registrytest.AssertPullable(t, r, "harness/idx:v1"); got.Digest != registrytest.Describe(t, idx).Digest {
		t.Errorf("pulled index %s, pushed %s", got.Digest, registrytest.Describe(t, idx).Digest)
	}
}

// AssertPullable must notice a blob whose bytes no longer match its digest;
// otherwise every "still pullable after GC" check built on it proves nothing.
func TestAssertPullableDetectsCorruptBlob(t *testing.T) {
	t.Parallel()
	r := registrytest.Start(t)
	img := registrytest.PushImage(t, r, "harness/corrupt:v1", 2)
	d := layerDigest(t, img, 1)
	data := blobPath(r, d)
	b, err := os.ReadFile(data)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff // same length, different bytes
	if err := os.WriteFile(data, b, 0o644); err != nil {
		t.Fatal(err)
	}

	rec := record(t, func(tb testing.TB) { registrytest.AssertPullable(tb, r, "harness/corrupt:v1") })
	if !rec.failed() || !strings.Contains(rec.log(), d.String()) {
		t.Fatalf("AssertPullable passed over corrupt layer %s; it reported: %q", d, rec.log())
	}
}

func TestAssertPullableDetectsMissingBlob(t *testing.T) {
	t.Parallel()
	r := registrytest.Start(t)
	img := registrytest.PushImage(t, r, "harness/missing:v1", 1)
	cfg, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(blobPath(r, cfg)); err != nil {
		t.Fatal(err)
	}
	rec := record(t, func(tb testing.TB) { registrytest.AssertPullable(tb, r, "harness/missing:v1") })
	if !rec.failed() {
		t.Fatalf("AssertPullable passed over a missing config blob %s", cfg)
	}
}

func TestHtpasswd(t *testing.T) {
	t.Parallel()
	r := registrytest.Start(t, registrytest.WithHtpasswd("alice", "s3cret"))

	resp, err := http.Get(r.URL + "/v2/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("anonymous GET /v2/: status %d, want 401", resp.StatusCode)
	}

	registrytest.PushImage(t, r, "harness/auth:v1", 1)
	registrytest.AssertPullable(t, r, "harness/auth:v1")
}

func TestMount(t *testing.T) {
	t.Parallel()
	r := registrytest.Start(t)
	img := registrytest.PushImage(t, r, "harness/src:v1", 1)
	d := layerDigest(t, img, 0)
	if got := registrytest.BlobStatus(t, r, "harness/dst", d); got != http.StatusNotFound {
		t.Fatalf("blob in target before mount: status %d, want 404", got)
	}
	registrytest.MountBlob(t, r, "harness/src", "harness/dst", d)
	if got := registrytest.BlobStatus(t, r, "harness/dst", d); got != http.StatusOK {
		t.Fatalf("blob in target after mount: status %d, want 200", got)
	}

	// A blob the source does not have cannot be mounted: the registry
	// falls back to an ordinary upload (202), which MountBlob rejects.
	unknown := v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("ab", 32)}
	if got := registrytest.TryMountBlob(t, r, "harness/src", "harness/dst", unknown); got != http.StatusAccepted {
		t.Fatalf("mount of unknown blob: status %d, want 202", got)
	}
}

func TestWithRootDirectorySharesStorage(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	a := registrytest.Start(t, registrytest.WithRootDirectory(root))
	b := registrytest.Start(t, registrytest.WithRootDirectory(root))
	registrytest.PushImage(t, a, "harness/shared:v1", 2)
	registrytest.AssertPullable(t, b, "harness/shared:v1")
}

func TestBadConfigFailsTheTest(t *testing.T) {
	t.Parallel()
	rec := record(t, func(tb testing.TB) {
		registrytest.Start(tb, registrytest.WithStorageMiddleware("no-such-middleware", nil))
	})
	if !rec.failed() || !strings.Contains(rec.log(), "no-such-middleware") {
		t.Fatalf("Start with an unknown middleware did not fail clearly: %q", rec.log())
	}
}

// layerDigest is the digest of img's i-th layer.
func layerDigest(t *testing.T, img v1.Image, i int) v1.Hash {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	d, err := layers[i].Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func blobPath(r *registrytest.Registry, d v1.Hash) string {
	return filepath.Join(r.Root, "docker/registry/v2/blobs", d.Algorithm, d.Hex[:2], d.Hex, "data")
}

// recorder is a testing.TB that records failures instead of failing the
// real test, so a test can check that an assertion helper does fail.
type recorder struct {
	testing.TB
	mu       sync.Mutex
	buf      bytes.Buffer
	isFailed bool
}

func record(t *testing.T, f func(testing.TB)) *recorder {
	rec := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(rec)
	}()
	<-done
	return rec
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.isFailed = true
	r.buf.WriteString(strings.TrimSpace(fmt.Sprintf(format, args...)) + "\n")
}

func (r *recorder) Error(args ...any)                 { r.Errorf("%s", fmt.Sprint(args...)) }
func (r *recorder) Fatalf(format string, args ...any) { r.Errorf(format, args...); runtime.Goexit() }
func (r *recorder) Fatal(args ...any)                 { r.Error(args...); runtime.Goexit() }
func (r *recorder) Fail()                             { r.Errorf("Fail called") }
func (r *recorder) FailNow()                          { r.Fail(); runtime.Goexit() }

func (r *recorder) failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.isFailed
}

func (r *recorder) Failed() bool { return r.failed() }

func (r *recorder) log() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.buf.String()
}
