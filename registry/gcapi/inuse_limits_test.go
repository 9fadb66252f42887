package gcapi

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/opencontainers/go-digest"
	"github.com/redis/go-redis/v9"

	"github.com/reclaim-registry/reclaim/internal/config"
	"github.com/reclaim-registry/reclaim/registry/accesscontrol"
	"github.com/reclaim-registry/reclaim/retention/inuse"
	"github.com/reclaim-registry/reclaim/retention/redisstore"
)

// inUseBody is an in-use upload of about size bytes.
func inUseBody(size int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"images": [`)
	for i := 0; b.Len() < size; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"repository": "team/app-%d", "digest": "%s"}`, i%1000, digest.FromString(fmt.Sprint(i)))
	}
	b.WriteString("]}")
	return b.Bytes()
}

// allocatedBy is the bytes f allocates, and the highest heap in use seen
// while it runs (sampled every millisecond: for the log, not asserted).
func allocatedBy(f func()) (total, peak uint64) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	stop, sampled := make(chan struct{}), make(chan uint64)
	go func() {
		var m runtime.MemStats
		var high uint64
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				sampled <- high
				return
			case <-tick.C:
				runtime.ReadMemStats(&m)
				high = max(high, m.HeapInuse)
			}
		}
	}()
	f()
	close(stop)
	peak = <-sampled
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc, peak - min(peak, before.HeapInuse)
}

// Issue 25, item 7: a 22 MB in-use upload was read whole (io.ReadAll),
// walked for its keys, then decoded by a json.Decoder that buffered all
// of it again: 14.6 times the body in allocations (338 MB), two copies of
// it live at once. It is decoded as it is read now, never held whole:
// 7.3 times (169 MB), most of it encoding/json's per-token garbage; what
// stays is the images themselves.
func TestInUseBodyDecodeAllocations(t *testing.T) {
	body := inUseBody(22 << 20)
	var n int
	got, peak := allocatedBy(func() {
		var req struct {
			Images []inuse.Image `json:"images"`
		}
		if err := readJSON(httptest.NewRequest(http.MethodPut, "/", bytes.NewReader(body)), maxInUseBody, &req); err != nil {
			t.Fatal(err)
		}
		n = len(req.Images)
	})
	ratio := float64(got) / float64(len(body))
	t.Logf("%d images, body %d bytes: %d bytes allocated (%.2f x the body); heap in use grew by at most %d bytes (sampled)",
		n, len(body), got, ratio, peak)
	if ratio > 10 {
		t.Errorf("decoding a %d-byte upload allocated %d bytes, %.2f times the body; want at most 10", len(body), got, ratio)
	}
}

// BenchmarkInUseBody: bytes allocated per 22 MB in-use upload decoded.
func BenchmarkInUseBody(b *testing.B) {
	body := inUseBody(22 << 20)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		var req struct {
			Images []inuse.Image `json:"images"`
		}
		if err := readJSON(httptest.NewRequest(http.MethodPut, "/", bytes.NewReader(body)), maxInUseBody, &req); err != nil {
			b.Fatal(err)
		}
	}
}

// spaces reads as n spaces: a large body that costs the client nothing.
type spaces struct{ n int64 }

func (s *spaces) Read(p []byte) (int, error) {
	if s.n == 0 {
		return 0, io.EOF
	}
	m := min(int64(len(p)), s.n)
	for i := range p[:m] {
		p[i] = ' '
	}
	s.n -= m
	return int(m), nil
}

// largeUpload is a valid upload of exactly size bytes (an empty image
// list, padded).
func largeUpload(size int64) io.Reader {
	const open, end = `{"images": [`, `]}`
	return io.MultiReader(strings.NewReader(open), &spaces{n: size - int64(len(open)+len(end))}, strings.NewReader(end))
}

// Issue 25, item 7: the bytes of in-use uploads an instance reads at once
// are bounded (bodyBudget, two full-size uploads). Two 32 MiB uploads are
// held inside the bound (hook); a third waits for room (hook), gets it when
// one of them ends, and with no wait is refused at once: 429
// TOO_MANY_REQUESTS, Retry-After. A small upload is not counted.
func TestInUseBodyBound(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	api := newGCAPI(&accesscontrol.Control{}, config.Options{GC: config.GC{Enabled: true}}, &Config{InUse: redisstore.NewInUse(c, "")}, http.NotFoundHandler())
	held, release, waiting := make(chan struct{}, 8), make(chan struct{}), make(chan struct{}, 8)
	api.bodies.held = func() { held <- struct{}{}; <-release }
	api.bodies.waiting = func() { waiting <- struct{}{} }
	srv := httptest.NewServer(api)
	defer srv.Close()
	put := func(source string, body io.Reader, size int64) (*http.Response, error) {
		req, err := http.NewRequest(http.MethodPut, srv.URL+"/gc/v1/inuse/sources/"+source, body)
		if err != nil {
			return nil, err
		}
		req.ContentLength = size
		req.Header.Set("Content-Type", "application/json")
		return srv.Client().Do(req)
	}
	done := make(chan string, 3)
	upload := func(source string) {
		resp, err := put(source, largeUpload(maxInUseBody), maxInUseBody)
		if err != nil {
			done <- source + ": " + err.Error()
			return
		}
		resp.Body.Close()
		done <- fmt.Sprintf("%s: %d", source, resp.StatusCode)
	}
	go upload("a")
	go upload("b")
	<-held
	<-held // both inside the bound

	// No room, no wait: refused before its body is read.
	api.bodies.wait = 0
	resp, err := put("c", largeUpload(maxInUseBody), maxInUseBody)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "TOO_MANY_REQUESTS") {
		t.Fatalf("a third 32 MiB upload: %d %q %s; want 429 TOO_MANY_REQUESTS with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	<-waiting // it was told to wait (for no time)
	// A small upload is not counted.
	small := `{"images":[{"repository":"team/app","digest":"` + digest.FromString("x").String() + `"}]}`
	resp, err = put("small", strings.NewReader(small), int64(len(small)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a small upload while the bound is full: %d", resp.StatusCode)
	}

	// With a wait, a third one waits for room and gets it.
	api.bodies.wait = bodyWait * 100
	go upload("c")
	<-waiting
	release <- struct{}{} // one of a, b ends
	<-held                // c is inside
	close(release)
	for range 3 {
		if r := <-done; !strings.HasSuffix(r, ": 200") {
			t.Errorf("upload %s, want 200", r)
		}
	}
}
