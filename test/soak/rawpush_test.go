package soak

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/reclaim-registry/reclaim/registry/registrytest"
)

// rawImage is an image as a plain HTTP client pushes it.
type rawImage struct {
	digest    v1.Hash
	mediaType string
	manifest  []byte
	blobs     []rawBlob
}

type rawBlob struct {
	d      v1.Hash
	b      []byte
	unique bool // not a shared base layer: only this image links it
}

func (w *workload) rawImage(rng *rand.Rand) (*rawImage, error) {
	img, err := w.image(rng)
	if err != nil {
		return nil, err
	}
	ri := &rawImage{}
	if ri.digest, err = img.Digest(); err != nil {
		return nil, err
	}
	mt, err := img.MediaType()
	if err != nil {
		return nil, err
	}
	ri.mediaType = string(mt)
	if ri.manifest, err = img.RawManifest(); err != nil {
		return nil, err
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		return nil, err
	}
	cd, err := img.ConfigName()
	if err != nil {
		return nil, err
	}
	ri.blobs = append(ri.blobs, rawBlob{d: cd, b: cfg, unique: true})
	layers, err := img.Layers()
	if err != nil {
		return nil, err
	}
	for _, l := range layers {
		b, err := w.rawLayer(l)
		if err != nil {
			return nil, err
		}
		ri.blobs = append(ri.blobs, b)
	}
	return ri, nil
}

// rawLayer reads l's compressed bytes.
func (w *workload) rawLayer(l v1.Layer) (rawBlob, error) {
	d, err := l.Digest()
	if err != nil {
		return rawBlob{}, err
	}
	rc, err := l.Compressed()
	if err != nil {
		return rawBlob{}, err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return rawBlob{}, err
	}
	unique := true
	for _, base := range w.base {
		if bd, _ := base.Digest(); bd == d {
			unique = false
		}
	}
	return rawBlob{d: d, b: b, unique: unique}, nil
}

// answer is a registry response as the racers judge it.
type answer struct {
	code  int
	class string // "<code> <CODE>" from the error body, or a short label
	hdr   http.Header
}

func (a answer) String() string { return a.class }

// do sends one request; target is a path ("/v2/...") or an absolute URL (a
// Location header).
func do(ctx context.Context, r *registrytest.Registry, method, target string, hdr map[string]string, body []byte) answer {
	resp, err := send(ctx, r, method, target, hdr, body)
	if err != nil {
		return answer{class: errorClass(err)}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return answer{code: resp.StatusCode, hdr: resp.Header, class: statusClass(resp.StatusCode, b)}
}

// retry repeats a request refused as retryable (503, 429, connection) up
// to three times, as a client does, and counts the refusals under kind.
func (w *workload) retry(ctx context.Context, kind string, f func() answer) answer {
	var a answer
	for attempt := range 3 {
		a = f()
		if a.code != http.StatusServiceUnavailable && a.code != http.StatusTooManyRequests && a.code != 0 {
			return a
		}
		w.races.add(kind+" refused (retried): "+a.class, 1)
		if !backoff(ctx, 100*time.Millisecond, attempt) {
			return a
		}
	}
	return a
}

func headBlob(ctx context.Context, r *registrytest.Registry, repo string, d v1.Hash) answer {
	return do(ctx, r, http.MethodHead, "/v2/"+repo+"/blobs/"+d.String(), nil, nil)
}

func headManifest(ctx context.Context, r *registrytest.Registry, repo string, ri *rawImage) answer {
	return do(ctx, r, http.MethodHead, "/v2/"+repo+"/manifests/"+ri.digest.String(), map[string]string{"Accept": ri.mediaType}, nil)
}

// uploadBlob uploads b into repo: POST, then a monolithic PUT with the digest.
func uploadBlob(ctx context.Context, r *registrytest.Registry, repo string, b rawBlob) answer {
	start := do(ctx, r, http.MethodPost, "/v2/"+repo+"/blobs/uploads/", nil, nil)
	if start.code != http.StatusAccepted {
		return start
	}
	u, err := url.Parse(start.hdr.Get("Location"))
	if err != nil {
		return answer{class: "other: bad Location"}
	}
	q := u.Query()
	q.Set("digest", b.d.String())
	u.RawQuery = q.Encode()
	t0 := time.Now().Format("15:04:05.000")
	a := do(ctx, r, http.MethodPut, u.String(), map[string]string{"Content-Type": "application/octet-stream"}, b.b)
	diagf("upload %s into %s via %s (commit started %s): %d %s", b.d, repo, r.URL, t0, a.code, a.class)
	return a
}

func putManifest(ctx context.Context, r *registrytest.Registry, repo, reference string, ri *rawImage) answer {
	return do(ctx, r, http.MethodPut, "/v2/"+repo+"/manifests/"+reference, map[string]string{"Content-Type": ri.mediaType}, ri.manifest)
}

// uploadAll uploads every blob of ri into repo, retrying refusals, and
// returns the first answer that is not a 201 (a zero answer when all are).
func (w *workload) uploadAll(ctx context.Context, kind string, r *registrytest.Registry, repo string, ri *rawImage) (answer, bool) {
	for _, b := range ri.blobs {
		if a := w.retry(ctx, kind, func() answer { return uploadBlob(ctx, r, repo, b) }); a.code != http.StatusCreated {
			return a, false
		}
	}
	return answer{}, true
}

// pushRaw uploads every blob of ri into repo and PUTs its manifest as
// reference, retrying refusals. It returns the manifest PUT's answer and
// when that PUT started.
func (w *workload) pushRaw(ctx context.Context, kind string, r *registrytest.Registry, repo, reference string, ri *rawImage) (answer, time.Time) {
	if a, ok := w.uploadAll(ctx, kind+" upload", r, repo, ri); !ok {
		return a, time.Time{}
	}
	put := time.Now()
	return w.retry(ctx, kind+" put", func() answer { return putManifest(ctx, r, repo, reference, ri) }), put
}

// putClock records when a push's first manifest PUT started (ggcr pushes
// through it): the registry's protection of what that PUT verified starts
// there.
type putClock struct {
	base  http.RoundTripper
	mu    sync.Mutex
	first time.Time
}

func (p *putClock) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPut && strings.Contains(req.URL.Path, "/manifests/") {
		p.mu.Lock()
		if p.first.IsZero() {
			p.first = time.Now()
		}
		p.mu.Unlock()
	}
	return p.base.RoundTrip(req)
}

func (p *putClock) started() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.first.IsZero() {
		return time.Now()
	}
	return p.first
}

func newPutClock() *putClock { return &putClock{base: remote.DefaultTransport} }
