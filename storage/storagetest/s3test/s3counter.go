package s3test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// S3Counter is a reverse proxy in front of an S3 server that counts every
// request by S3 operation, as an object store bills them: what a driver
// does, seen on the wire. Point a driver's regionendpoint at URL.
//
// A list's cost grows with the keys it returns as well as with the calls
// (one call returns at most 1000): Listed counts the keys and common
// prefixes of every ListObjects answer, Batched the keys of every
// DeleteObjects request.
type S3Counter struct {
	URL string

	mu      sync.Mutex
	ops     map[string]int
	listed  int
	batched int
}

// NewS3Counter starts a counting proxy to endpoint; t.Cleanup stops it.
func NewS3Counter(t testing.TB, endpoint string) *S3Counter {
	t.Helper()
	target, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	c := &S3Counter{ops: map[string]int{}}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.ModifyResponse = c.countResponse
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		op := S3Operation(r)
		if op == "DeleteObjects" {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			c.add(op, 0, bytes.Count(body, []byte("<Object>")))
		} else {
			c.add(op, 0, 0)
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	c.URL = srv.URL
	return c
}

// countResponse counts the entries of a ListObjects answer. The body is
// small (at most 1000 entries); it is read and handed on unchanged.
func (c *S3Counter) countResponse(resp *http.Response) error {
	if !strings.HasPrefix(S3Operation(resp.Request), "ListObjects") {
		return nil
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	c.add("", bytes.Count(body, []byte("<Contents>"))+bytes.Count(body, []byte("<CommonPrefixes>")), 0)
	return nil
}

func (c *S3Counter) add(op string, listed, batched int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if op != "" {
		c.ops[op]++
	}
	c.listed += listed
	c.batched += batched
}

// S3Calls is what an S3Counter counted since its last Reset.
type S3Calls struct {
	Ops map[string]int
	// Listed: keys and common prefixes returned by every ListObjects.
	Listed int
	// Batched: keys named by every DeleteObjects.
	Batched int
}

// Snapshot returns the counts since the last Reset.
func (c *S3Counter) Snapshot() S3Calls {
	c.mu.Lock()
	defer c.mu.Unlock()
	ops := make(map[string]int, len(c.ops))
	for k, v := range c.ops {
		ops[k] = v
	}
	return S3Calls{Ops: ops, Listed: c.listed, Batched: c.batched}
}

// Reset sets every count to zero.
func (c *S3Counter) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ops = map[string]int{}
	c.listed, c.batched = 0, 0
}

// Total is the number of requests of every kind.
func (s S3Calls) Total() int {
	n := 0
	for _, v := range s.Ops {
		n += v
	}
	return n
}

// String lists the counts by operation, sorted.
func (s S3Calls) String() string {
	var kinds []string
	for k := range s.Ops {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	var b strings.Builder
	for i, k := range kinds {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(k + "=" + strconv.Itoa(s.Ops[k]))
	}
	return b.String()
}

// S3Operation names the S3 API operation of a path-style request
// ("/bucket" or "/bucket/key..."), by method, path and query.
func S3Operation(r *http.Request) string {
	q := r.URL.Query()
	object := strings.Contains(strings.TrimPrefix(r.URL.Path, "/"), "/")
	has := func(k string) bool { _, ok := q[k]; return ok }
	switch r.Method {
	case http.MethodGet:
		switch {
		case !object && has("uploads"):
			return "ListMultipartUploads"
		case !object && q.Get("list-type") == "2":
			return "ListObjectsV2"
		case !object:
			return "ListObjects"
		case has("uploadId"):
			return "ListParts"
		}
		return "GetObject"
	case http.MethodHead:
		if !object {
			return "HeadBucket"
		}
		return "HeadObject"
	case http.MethodPut:
		switch {
		case has("uploadId") && r.Header.Get("X-Amz-Copy-Source") != "":
			return "UploadPartCopy"
		case has("uploadId"):
			return "UploadPart"
		case r.Header.Get("X-Amz-Copy-Source") != "":
			return "CopyObject"
		}
		return "PutObject"
	case http.MethodPost:
		switch {
		case has("delete"):
			return "DeleteObjects"
		case has("uploads"):
			return "CreateMultipartUpload"
		case has("uploadId"):
			return "CompleteMultipartUpload"
		}
		return "POST"
	case http.MethodDelete:
		if has("uploadId") {
			return "AbortMultipartUpload"
		}
		return "DeleteObject"
	}
	return r.Method
}
