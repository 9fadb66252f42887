package s3test

import (
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// S3Staller is a reverse proxy in front of an S3 server that holds back a
// fraction of the answers to blob-data requests after the store gave them:
// the request reached the store and was answered, and the registry hears
// the answer Delay later. A long GC pause or a slow network looks exactly
// like that, and it is where a request's existence check and the write
// that relies on it drift more than W apart (docs/gc-protocol.md, case 12).
// Point a driver's regionendpoint at URL.
type S3Staller struct {
	URL string
	// Rate is the fraction of blob-data answers held back, in 1/1000.
	Rate atomic.Int64
	// Delay is how long an answer is held.
	Delay time.Duration

	stalled atomic.Int64
	seen    atomic.Int64
}

// NewS3Staller starts a stalling proxy to endpoint that holds rate/1000 of
// the answers to HEAD and GET requests of blob data (".../blobs/<alg>/<2>/
// <hex>/data") for delay; t.Cleanup stops it.
func NewS3Staller(t testing.TB, endpoint string, rate int64, delay time.Duration) *S3Staller {
	t.Helper()
	target, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	s := &S3Staller{Delay: delay}
	s.Rate.Store(rate)
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.ModifyResponse = func(resp *http.Response) error {
		if s.stalls(resp.Request) {
			// The store answered; the registry hears it later.
			time.Sleep(s.Delay)
		}
		return nil
	}
	srv := httptest.NewServer(proxy)
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

// stalls draws whether the answer to r is held back, and counts it.
func (s *S3Staller) stalls(r *http.Request) bool {
	if r.Method != http.MethodHead && r.Method != http.MethodGet {
		return false
	}
	if !strings.Contains(r.URL.Path, "/blobs/") || !strings.HasSuffix(r.URL.Path, "/data") {
		return false
	}
	s.seen.Add(1)
	if rand.Int64N(1000) >= s.Rate.Load() {
		return false
	}
	s.stalled.Add(1)
	return true
}

// Counts are the blob-data answers seen and those held back so far.
func (s *S3Staller) Counts() (seen, stalled int64) {
	return s.seen.Load(), s.stalled.Load()
}
