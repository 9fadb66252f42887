package middleware

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/distribution/distribution/v3/registry/handlers"
	registrymiddleware "github.com/distribution/distribution/v3/registry/middleware/registry"
	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/opencontainers/go-digest"
	"github.com/sirupsen/logrus"

	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

// testHook sits between the real driver and reclaim ("testhook" in every
// test app's middleware list); each test sets the hook it needs.
var testHook = storagetest.RegisterHook("testhook")

func init() {
	logrus.SetLevel(logrus.FatalLevel)
	// what registry/hooks.go does for the real binary
	_ = registrymiddleware.RegisterOptions(RegistryOption())
}

type appOptions struct {
	noReclaim bool   // measure upstream without the middleware
	cache     string // blob descriptor cache: "", "inmemory"
	window    time.Duration
	redisAddr string // host:port, or a cluster's nodes joined by commas
	prefix    string
	root      string // storage root; default a new temporary directory
	// validation replaces Distribution's `validation:` section (default:
	// enabled, every index child verified)
	validation *configuration.Validation
	auth       bool // "silly" auth: any Authorization header passes
}

type testApp struct {
	t     testing.TB
	opts  appOptions
	srv   *httptest.Server
	env   *Env // nil without the middleware
	count *storagetest.CountingDriver
	rc    *storagetest.RedisCounter
	host  string
	root  string
}

// skipCache: Distribution's redis blob descriptor cache does not work on a
// Redis Cluster (config.ErrClusterDescriptorCache), so the cluster backend
// runs without it.
func skipCache(b storagetest.Backend, cache string) bool { return cache == "redis" && b.Cluster }

// newTestApp runs Distribution's app in-process on the filesystem driver,
// with (count -> testhook -> reclaim) storage middlewares and our Handler.
func newTestApp(t testing.TB, o appOptions) *testApp {
	t.Helper()
	root := o.root
	if root == "" {
		root = t.TempDir()
	}
	cfg := &configuration.Configuration{}
	cfg.Version = "0.1"
	cfg.Log.Level = "error"
	cfg.HTTP.Secret = "test-secret"
	cfg.Catalog.MaxEntries = 1000
	cfg.Storage = configuration.Storage{
		"filesystem":  configuration.Parameters{"rootdirectory": root},
		"delete":      configuration.Parameters{"enabled": true},
		"maintenance": configuration.Parameters{"uploadpurging": map[any]any{"enabled": false}},
	}
	if o.validation != nil {
		cfg.Validation = *o.validation
	}
	if o.auth {
		cfg.Auth = configuration.Auth{"silly": configuration.Parameters{"realm": "test", "service": "test"}}
	}
	if o.cache != "" {
		cfg.Storage["cache"] = configuration.Parameters{"blobdescriptor": o.cache}
	}
	if o.cache == "redis" {
		cfg.Redis.Options.Addrs = storagetest.Addrs(o.redisAddr)
	}
	mws := []configuration.Middleware{{Name: "count"}, {Name: "testhook"}}
	if !o.noReclaim {
		opts := map[string]any{"prefix": o.prefix}
		if o.redisAddr != "" {
			var addrs []any // a cluster's nodes are comma-separated
			for _, a := range storagetest.Addrs(o.redisAddr) {
				addrs = append(addrs, a)
			}
			opts["redis"] = map[any]any{"addrs": addrs}
		}
		if o.window > 0 {
			opts["window"] = o.window.String()
			opts["dedup"] = (o.window / 20).String()
			opts["fencewait"] = "1s"
			opts["fencepoll"] = "20ms"
		}
		mws = append(mws, configuration.Middleware{Name: MiddlewareName, Options: opts})
	}
	cfg.Middleware = map[string][]configuration.Middleware{"storage": mws}
	ctx, cancel := context.WithCancel(context.Background())
	a := &testApp{t: t, opts: o, root: root}
	if !o.noReclaim {
		// Open builds the driver stack the app uses below reclaim: its
		// counting driver is the one that sees the app's calls.
		env, err := open(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		a.env, a.count = env, storagetest.LastCounting()
		a.rc = &storagetest.RedisCounter{}
		env.Tracker.Client().AddHook(a.rc)
	}
	app := handlers.NewApp(ctx, cfg)
	var h http.Handler = app
	if a.env == nil {
		a.count = storagetest.LastCounting()
	} else {
		h = a.env.Handler(app)
	}
	a.srv = httptest.NewServer(h)
	a.host = strings.TrimPrefix(a.srv.URL, "http://")
	t.Cleanup(func() {
		a.srv.Close()
		cancel()
		if a.env != nil {
			a.env.Close()
		}
	})
	return a
}

func (a *testApp) ref(s string) name.Reference {
	a.t.Helper()
	r, err := name.ParseReference(a.host + "/" + s)
	if err != nil {
		a.t.Fatal(err)
	}
	return r
}

// noRetry makes go-containerregistry give up at the first error, so a test
// sees the status the registry answered.
var noRetry = remote.WithRetryBackoff(remote.Backoff{Duration: time.Millisecond, Steps: 1})

func (a *testApp) push(ref string, img v1.Image, opts ...remote.Option) error {
	return remote.Write(a.ref(ref), img, opts...)
}

// pushRandom pushes a random image of the given number of 256-byte layers
// as ref and returns it.
func (a *testApp) pushRandom(ref string, layers int64) v1.Image {
	a.t.Helper()
	img, err := random.Image(256, layers)
	if err != nil {
		a.t.Fatal(err)
	}
	if err := a.push(ref, img); err != nil {
		a.t.Fatal(err)
	}
	return img
}

func (a *testApp) do(method, path string) *http.Response {
	a.t.Helper()
	return a.doBody(method, path, "")
}

func (a *testApp) doBody(method, path, body string) *http.Response {
	a.t.Helper()
	req, err := http.NewRequest(method, a.srv.URL+path, strings.NewReader(body))
	if err != nil {
		a.t.Fatal(err)
	}
	req.Header.Set("Accept", "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.v2+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	// The body is read and kept, so the connection is reused and a test
	// can still look at it.
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(b))
	return resp
}

func (a *testApp) headBlob(repo string, d digest.Digest) int {
	return a.do(http.MethodHead, fmt.Sprintf("/v2/%s/blobs/%s", repo, d)).StatusCode
}

func (a *testApp) getBlob(repo string, d digest.Digest) int {
	return a.do(http.MethodGet, fmt.Sprintf("/v2/%s/blobs/%s", repo, d)).StatusCode
}

func (a *testApp) mount(repo, from string, d digest.Digest) int {
	return a.do(http.MethodPost, fmt.Sprintf("/v2/%s/blobs/uploads/?mount=%s&from=%s", repo, d, from)).StatusCode
}

// pullAll pulls ref and reads every layer, failing the test on any error.
func (a *testApp) pullAll(ref string) {
	a.t.Helper()
	img, err := remote.Image(a.ref(ref), noRetry)
	if err != nil {
		a.t.Fatalf("pull %s: %v", ref, err)
	}
	layers, err := img.Layers()
	if err != nil {
		a.t.Fatal(err)
	}
	for _, l := range layers {
		rc, err := l.Compressed()
		if err != nil {
			a.t.Fatalf("pull %s layer: %v", ref, err)
		}
		if _, err := io.Copy(io.Discard, rc); err != nil {
			a.t.Fatalf("pull %s layer: %v", ref, err)
		}
		rc.Close()
	}
}

func imageDigests(t testing.TB, img v1.Image) (manifest digest.Digest, blobs []digest.Digest) {
	t.Helper()
	m, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	c, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	blobs = append(blobs, digest.Digest(c.String()))
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		h, err := l.Digest()
		if err != nil {
			t.Fatal(err)
		}
		blobs = append(blobs, digest.Digest(h.String()))
	}
	return digest.Digest(m.String()), blobs
}

// checkLinkDB walks the storage and fails unless every forward layer or
// revision link has its reverse link and every reverse link its forward link.
func checkLinkDB(t testing.TB, d storagedriver.StorageDriver) (forward int) {
	t.Helper()
	fwd, rev := walkLinkDB(t, d)
	for p := range fwd {
		if !rev[p] {
			t.Errorf("forward link without reverse link: %s", p)
		}
	}
	for p := range rev {
		if !fwd[p] {
			t.Errorf("reverse link without forward link: %s", p)
		}
	}
	return len(fwd)
}

func walkLinkDB(t testing.TB, d storagedriver.StorageDriver) (fwd, rev map[string]bool) {
	t.Helper()
	ctx := context.Background()
	fwd, rev = map[string]bool{}, map[string]bool{}
	for _, root := range []string{layout.RepositoriesRoot, layout.BlobsRoot} {
		err := d.Walk(ctx, root, func(fi storagedriver.FileInfo) error {
			if fi.IsDir() {
				return nil
			}
			p := layout.Classify(fi.Path())
			switch p.Kind {
			case layout.PathLayerLink, layout.PathRevisionLink:
				b, err := d.GetContent(ctx, fi.Path())
				if err != nil {
					return err
				}
				if digest.Digest(b) != p.Digest {
					t.Errorf("link %s holds %s", fi.Path(), b)
				}
				fwd[layout.ReverseLinkPath(p.Digest, p.Repo, p.LinkSet())] = true
			case layout.PathReverseLink:
				rev[fi.Path()] = true
			}
			return nil
		})
		if err != nil && !strings.Contains(err.Error(), "not found") {
			t.Fatal(err)
		}
	}
	return fwd, rev
}

const hexA = "a3ed95caeb02ffe68cdd9fd84406680ae93d633cb16422d00e8a7c22955b46d4"

var dA = digest.Digest("sha256:" + hexA)
var dB = digest.FromString("b")
