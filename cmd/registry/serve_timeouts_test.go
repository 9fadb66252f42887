package main

import (
	"bufio"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/reclaim-registry/reclaim/registry/registrytest"
)

// timeoutsOptions are short server timeouts, so that the test takes
// seconds: headers within 500ms, a body silent for at most 1s, a kept-alive
// connection idle for at most 1s.
var timeoutsOptions = map[string]any{"http": map[string]any{
	"readheadertimeout": "500ms", "bodyidletimeout": "1s", "idletimeout": "1s"}}

// closedWithin reads c until it is closed (or answers) and fails unless
// that happens within limit.
func closedWithin(t *testing.T, c net.Conn, limit time.Duration, what string) {
	t.Helper()
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(limit))
	_, err := io.Copy(io.Discard, c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("%s: the connection is still open after %v", what, limit)
	}
	t.Logf("%s: closed after %v", what, time.Since(start).Round(time.Millisecond))
}

// TestServeTimeouts runs `registry serve` with the http: options and shows
// each timeout at work against the real server: a client that drips its
// headers, one that stops sending its body, and a kept-alive connection
// left idle are closed; an honest upload that keeps sending slowly for
// longer than every timeout succeeds.
func TestServeTimeouts(t *testing.T) {
	p := registrytest.StartProcess(t, registrytest.WithStorageMiddleware("reclaim", timeoutsOptions))
	host := strings.TrimPrefix(p.URL, "http://")
	dial := func() net.Conn {
		c, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}

	t.Run("headers dripped", func(t *testing.T) {
		c := dial()
		go func() { // a byte every 100ms, for as long as the server listens
			msg := "GET /v2/ HTTP/1.1\r\nHost: x\r\n" + strings.Repeat("X-Slow: yes\r\n", 1000)
			for i := range len(msg) {
				if _, err := c.Write([]byte{msg[i]}); err != nil {
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		}()
		closedWithin(t, c, 5*time.Second, "dripped headers")
	})

	t.Run("idle keep-alive", func(t *testing.T) {
		c := dial()
		if _, err := io.WriteString(c, "GET /v2/ HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != http.StatusOK || resp.Close {
			t.Fatalf("GET /v2/: %v %v", resp, err)
		}
		resp.Body.Close()
		closedWithin(t, c, 5*time.Second, "idle connection")
	})

	t.Run("body stops", func(t *testing.T) {
		loc := startUpload(t, p.URL, "stop/app")
		c := dial()
		fmt.Fprintf(c, "PATCH %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\nContent-Length: 1048576\r\n\r\n", loc)
		if _, err := c.Write(make([]byte, 1024)); err != nil {
			t.Fatal(err)
		}
		closedWithin(t, c, 5*time.Second, "a body that stopped after 1 KiB of 1 MiB")
	})

	t.Run("body left unread", func(t *testing.T) {
		// answered 404 without a read: the server reads what is left of
		// the body before the next request, and the client stalls there
		c := dial()
		fmt.Fprintf(c, "PATCH /v2/stop/app/blobs/uploads/nosuchupload HTTP/1.1\r\nHost: x\r\nContent-Length: 200000\r\n\r\n")
		if _, err := c.Write(make([]byte, 1024)); err != nil {
			t.Fatal(err)
		}
		closedWithin(t, c, 5*time.Second, "an unread body that stopped after 1 KiB")
	})

	t.Run("slow honest upload", func(t *testing.T) {
		slowUpload(t, p.URL, "slow/app", 30, 100*time.Millisecond) // 3s: past every timeout
	})
}

// startUpload starts a blob upload to repo and returns its location path.
func startUpload(t *testing.T, base, repo string) string {
	t.Helper()
	resp, err := http.Post(base+"/v2/"+repo+"/blobs/uploads/", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, err := url.Parse(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusAccepted || err != nil {
		t.Fatalf("start upload: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	return loc.RequestURI()
}

// slowUpload uploads chunks KiB to repo in one PATCH, a KiB every every,
// commits it and checks the blob is served.
func slowUpload(t *testing.T, base, repo string, chunks int, every time.Duration) {
	t.Helper()
	loc := startUpload(t, base, repo)
	pr, pw := io.Pipe()
	h := sha256.New()
	go func() {
		for i := range chunks {
			chunk := []byte(strings.Repeat(string(rune('a'+i%26)), 1024))
			h.Write(chunk)
			if _, err := pw.Write(chunk); err != nil {
				return
			}
			time.Sleep(every)
		}
		pw.Close()
	}()
	req, _ := http.NewRequest(http.MethodPatch, base+loc, pr)
	req.Header.Set("Content-Type", "application/octet-stream")
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("PATCH after %v: %v", time.Since(start), err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("PATCH after %v: %d, want 202", time.Since(start), resp.StatusCode)
	}
	d := fmt.Sprintf("sha256:%x", h.Sum(nil))
	loc2, _ := url.Parse(resp.Header.Get("Location"))
	q := loc2.Query()
	q.Set("digest", d)
	loc2.RawQuery = q.Encode()
	put, _ := http.NewRequest(http.MethodPut, base+loc2.RequestURI(), nil)
	resp, err = http.DefaultClient.Do(put)
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("commit %s: %v %v", d, resp, err)
	}
	resp.Body.Close()
	resp, err = http.Head(base + "/v2/" + repo + "/blobs/" + d)
	if err != nil || resp.StatusCode != http.StatusOK || resp.ContentLength != int64(chunks*1024) {
		t.Fatalf("HEAD blob: %v %v", resp, err)
	}
	t.Logf("a %d KiB PATCH over %v: 202, committed", chunks, time.Since(start).Round(time.Millisecond))
}
