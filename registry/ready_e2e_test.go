package registry_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/registry"
	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/storage/storagetest/redistest"
)

// The readiness probe tells the truth about Redis: ok while it answers,
// 503 while it is killed (and a push then answers 503 UNAVAILABLE with
// Retry-After, not 500), ok again once it is back; 503 while its eviction
// policy may drop records, ok when that is undone. Unauthenticated on a
// registry with auth, and it says nothing beyond ok / not ready.
func TestE2EReadinessFollowsRedis(t *testing.T) {
	s := redistest.StartRedisServer(t)
	opts := reclaimOptions(t, e2eWindow, s.Addr)
	opts["epochinterval"] = "1h" // the test drives the recording ticks
	r := registrytest.Start(t, registrytest.WithStorageMiddleware("reclaim", opts),
		registrytest.WithHtpasswd("ops", "secret"))
	env := r.Server.Env()

	probe := func() (int, string) {
		t.Helper()
		resp, err := http.Get(r.URL + registry.ReadyPath) // no credentials
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// waitProbe polls until the probe answers want: go-redis reconnects
	// in its own time after a restart.
	waitProbe := func(want int) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			code, body := probe()
			if code == want {
				if want == http.StatusOK && body != "ok\n" || want != http.StatusOK && strings.TrimSpace(body) != "not ready" {
					t.Fatalf("probe %d %q: says more than ok / not ready", code, body)
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("probe = %d %q, want %d", code, body, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	waitProbe(http.StatusOK)

	s.Kill()
	waitProbe(http.StatusServiceUnavailable)
	assertPushUnavailable(t, r)

	s.Start(t)
	waitProbe(http.StatusOK)

	c := s.Client(t)
	for _, step := range []struct {
		policy string
		want   int
	}{{"allkeys-lru", http.StatusServiceUnavailable}, {"noeviction", http.StatusOK}} {
		if err := c.ConfigSet(t.Context(), "maxmemory-policy", step.policy).Err(); err != nil {
			t.Fatal(err)
		}
		_ = env.Tracker.StartRecording(t.Context()) // the tick that reads the policy
		if code, body := probe(); code != step.want {
			t.Fatalf("maxmemory-policy %s: probe %d %q, want %d", step.policy, code, body, step.want)
		}
	}
}

// assertPushUnavailable: an upload commit while Redis is down answers 503
// with Retry-After and Distribution's UNAVAILABLE, in words a client's user
// can act on.
func assertPushUnavailable(t *testing.T, r *registrytest.Registry) {
	t.Helper()
	resp := r.Do(t, http.MethodPost, "/v2/ready/app/blobs/uploads/", nil)
	resp.Body.Close()
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusAccepted || loc == "" {
		t.Fatalf("start upload with Redis down: %d %q", resp.StatusCode, loc)
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPut, loc+"&digest="+digest.FromString("x").String(), strings.NewReader("x"))
	req.SetBasicAuth("ops", "secret")
	put, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(put.Body)
	put.Body.Close()
	var errs struct {
		Errors []struct{ Code, Detail string }
	}
	_ = json.Unmarshal(body, &errs)
	if put.StatusCode != http.StatusServiceUnavailable || put.Header.Get("Retry-After") == "" ||
		len(errs.Errors) != 1 || errs.Errors[0].Code != "UNAVAILABLE" || !strings.Contains(errs.Errors[0].Detail, "Redis") {
		t.Fatalf("upload commit with Redis down: %d Retry-After %q %s, want 503 UNAVAILABLE naming Redis",
			put.StatusCode, put.Header.Get("Retry-After"), body)
	}

}
