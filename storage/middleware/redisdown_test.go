package middleware

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

// Redis down: pulls keep working, pushes fail with a retryable 503, and
// when Redis is back the epoch moves past the gap.
func TestRedisDown(t *testing.T) {
	b := storagetest.Backends(t)[0]
	a := newTestApp(t, appOptions{redisAddr: b.Addr, prefix: b.Prefix})
	a.pushRandom("r:v1", 2)
	e0, _ := a.env.Tracker.RecordingSince(context.Background())
	b.Mini.SetError("LOADING injected outage")
	a.pullAll("r:v1")
	img2, _ := random.Image(256, 1)
	err := a.push("r:v2", img2, noRetry)
	if statusOf(err) != http.StatusServiceUnavailable {
		t.Fatalf("push with redis down: %v, want 503", err)
	}
	b.Mini.SetError("")
	b.Mini.SetTime(e0.Add(time.Second)) // Redis time moves on past the gap
	if err := a.push("r:v2", img2); err != nil {
		t.Fatal(err)
	}
	e1, err := a.env.Tracker.RecordingSince(context.Background())
	if err != nil || !e1.After(e0) {
		t.Fatalf("epoch %v -> %v (%v): want it moved past the gap", e0, e1, err)
	}
	checkLinkDB(t, a.env.Raw)
}

// Retry-After comes with the 503.
func TestRefusalHasRetryAfter(t *testing.T) {
	b := storagetest.Backends(t)[0]
	a := newTestApp(t, appOptions{redisAddr: b.Addr, prefix: b.Prefix})
	b.Mini.SetError("LOADING injected outage")
	defer b.Mini.SetError("")
	// an upload whose commit cannot be fence-checked
	resp := a.do(http.MethodPost, "/v2/r/blobs/uploads/")
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusAccepted || loc == "" {
		t.Fatalf("start upload: %d %q", resp.StatusCode, loc)
	}
	sep := "?"
	if strings.Contains(loc, "?") {
		sep = "&"
	}
	loc = strings.TrimPrefix(loc, a.srv.URL)
	resp = a.doBody(http.MethodPut, loc+sep+"digest="+digest.FromString("hello").String(), "hello")
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("status %d Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	// The body is Distribution's UNAVAILABLE in the client's words, not
	// UNKNOWN with the Redis client's error text.
	body, _ := io.ReadAll(resp.Body)
	var errs struct {
		Errors []struct{ Code, Message, Detail string }
	}
	if err := json.Unmarshal(body, &errs); err != nil || len(errs.Errors) != 1 {
		t.Fatalf("body %q: %v, want one error", body, err)
	}
	e := errs.Errors[0]
	if e.Code != "UNAVAILABLE" || !strings.Contains(e.Detail, "Redis does not answer") || strings.Contains(string(body), "LOADING") {
		t.Fatalf("body %q: want code UNAVAILABLE, a detail naming Redis and no Redis error text", body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
}
