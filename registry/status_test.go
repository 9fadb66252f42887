package registry_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/gc/reclaimer"
	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

func getStatus(t *testing.T, r *registrytest.Registry, auth bool) (int, map[string]json.RawMessage, reclaimer.Status) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, r.URL+"/gc/v1/status", nil)
	if auth {
		req.SetBasicAuth(r.Username, r.Password)
	}
	code, _, b := roundTrip(t, req)
	var out map[string]json.RawMessage
	var st reclaimer.Status
	if code == http.StatusOK {
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("status body %s: %v", b, err)
		}
		if err := json.Unmarshal(out["reclaimer"], &st); err != nil {
			t.Fatalf("reclaimer status %s: %v", out["reclaimer"], err)
		}
	}
	return code, out, st
}

// The reclaimer inside an in-process registry frees a manifest blob after
// its manifest is deleted through the registry API, with no collect call:
// the middleware queued it when the revision link went, the reclaimer found
// it due after W with no reverse link left. The layers stay: still linked.
func TestReclaimerFreesDeletedManifestAndReportsStatus(t *testing.T) {
	const window = time.Second
	m := miniredis.RunT(t)
	r := registrytest.Start(t,
		registrytest.WithHtpasswd("ops", "secret"),
		registrytest.WithStorageMiddleware("reclaim", map[string]any{
			"window": window.String(), "dedup": "10ms",
			"redis":     map[string]any{"addrs": []any{m.Addr()}},
			"gc":        map[string]any{"enabled": true},
			"reclaimer": map[string]any{"enabled": true, "interval": "100ms", "batch": 10},
		}))
	completeGC(t, r)

	if code, _, _ := getStatus(t, r, false); code != http.StatusUnauthorized {
		t.Fatalf("status without credentials: %d, want 401", code)
	}
	code, out, st := getStatus(t, r, true)
	if code != http.StatusOK || !st.Enabled || out["window_seconds"] == nil {
		t.Fatalf("status: %d %v %+v", code, out, st)
	}

	img := registrytest.PushImage(t, r, "app:v1", 2)
	md, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	// A push links every blob it commits: nothing to review yet.
	if _, _, st = getStatus(t, r, true); st.QueueLength != 0 {
		t.Fatalf("a fully linked push queued %d blobs for review", st.QueueLength)
	}
	resp := r.Do(t, http.MethodDelete, "/v2/app/manifests/"+md.String(), nil)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("delete manifest: %d", resp.StatusCode)
	}
	// A window passes (the Redis clock: the recording epoch, the access
	// records and the queue's due times), so the next tick may delete.
	r.Age(t, window+200*time.Millisecond)
	manifestData := filepath.Join(r.Root, layout.BlobDataPath(digest.Digest(md.String())))
	// Wait for the status, not only the file: a tick records its report
	// when it ends, after its deletes, so the file can be gone while the
	// tick that removed it has not been counted yet.
	deadline := time.Now().Add(time.Minute) // only a guard against a hang
	for {
		_, _, st = getStatus(t, r, true)
		if _, err := os.Stat(manifestData); os.IsNotExist(err) && st.Deleted > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("manifest blob not reclaimed within a minute of its window; reclaimer: %+v", st)
		}
		time.Sleep(50 * time.Millisecond)
	}
	layers, _ := img.Layers()
	for _, l := range layers {
		d, _ := l.Digest()
		if _, err := os.Stat(filepath.Join(r.Root, layout.BlobDataPath(digest.Digest(d.String())))); err != nil {
			t.Fatalf("layer %s (still linked by app) lost: %v", d, err)
		}
	}
	// The layers were never queued (the push linked them and the delete
	// removed no layer link), so only the manifest blob was reviewed.
	if st.Deleted < 1 || st.DeletedBy["unreferenced"] < 1 {
		t.Fatalf("status after reclaim: %+v", st)
	}
	// What the reclaimer freed is in the daily sums every instance reads.
	days, err := r.Server.Env().Tracker.Freed(t.Context(), time.Now(), 1)
	if err != nil || len(days) != 1 || days[0].Objects != st.Deleted || days[0].Bytes != st.BytesFreed || days[0].Bytes == 0 {
		t.Errorf("freed today: %+v, %v; the reclaimer deleted %d objects, %d bytes", days, err, st.Deleted, st.BytesFreed)
	}
}

// With the GC API disabled the reclaimer's status is still served, behind
// the same authentication.
func TestStatusWithGCAPIDisabled(t *testing.T) {
	m := miniredis.RunT(t)
	r := registrytest.Start(t,
		registrytest.WithHtpasswd("ops", "secret"),
		registrytest.WithStorageMiddleware("reclaim", map[string]any{
			"window": "1s", "dedup": "10ms",
			"redis":     map[string]any{"addrs": []any{m.Addr()}},
			"reclaimer": map[string]any{"enabled": false},
		}))
	if code, _, _ := getStatus(t, r, false); code != http.StatusUnauthorized {
		t.Fatalf("status without credentials: %d, want 401", code)
	}
	code, out, st := getStatus(t, r, true)
	if code != http.StatusOK || string(out["enabled"]) != "false" || out["gc_api"] == nil || st.Enabled {
		t.Fatalf("status: %d %s %+v", code, out, st)
	}
}
