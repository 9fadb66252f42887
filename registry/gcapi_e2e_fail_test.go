package registry_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/gc/collector"
	"github.com/reclaim-registry/reclaim/reclaim/gcrun"
	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

type apiErrors struct {
	Errors []struct {
		Code    string            `json:"code"`
		Message string            `json:"message"`
		Detail  map[string]string `json:"detail"`
	} `json:"errors"`
}

func decodeErr(t *testing.T, b []byte) (code, reason string) {
	t.Helper()
	var e apiErrors
	if err := json.Unmarshal(b, &e); err != nil || len(e.Errors) != 1 {
		t.Fatalf("error body %q: %v", b, err)
	}
	return e.Errors[0].Code, e.Errors[0].Detail["reason"]
}

// assertAbort checks that both a dry run and a real run are refused with
// 503 and reason, and that storage did not change.
func assertAbort(t *testing.T, g *gcRegistry, repo, reason string) {
	t.Helper()
	before := g.tree(t)
	for _, dry := range []bool{true, false} {
		code, body := g.collectRaw(t, repo, dry)
		if code != http.StatusServiceUnavailable {
			t.Fatalf("dry=%v: status %d %s", dry, code, body)
		}
		if c, r := decodeErr(t, body); c != "GC_ABORTED" || r != reason {
			t.Fatalf("dry=%v: %s %s, want GC_ABORTED %s", dry, c, r, reason)
		}
	}
	if after := g.tree(t); after != before {
		t.Fatalf("an aborted run changed storage:\n%s", diffLines(before, after))
	}
}

func TestE2ERedisDownAborts(t *testing.T) {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	opts := reclaimOptions(t, e2eWindow, m.Addr())
	opts["timeout"] = "200ms" // each refused Redis call costs at most this
	r := registrytest.Start(t, registrytest.WithStorageMiddleware("reclaim", opts))
	g := &gcRegistry{Registry: r, raw: rawDriver(t, r)}
	old := push(t, g, "down/app:v1", registrytest.Image(t, layer(t)))
	push(t, g, "down/app:v1", registrytest.Image(t, layer(t)))
	g.settle(t)
	m.Close()
	assertAbort(t, g, "down/app", "redis_unavailable")
	// Serving comes first: pulls go on without Redis.
	registrytest.AssertPullable(t, g.Registry, "down/app:v1")
	registrytest.AssertPullable(t, g.Registry, "down/app@"+old.String())
}

// assertBlocked checks that a real run is refused with 503 and reason,
// that a dry run answers 200 with the plan and reason listed as a run-wide
// blocker, and that neither changed storage. It returns the dry run.
func assertBlocked(t *testing.T, g *gcRegistry, repo, reason string) *collector.Report {
	t.Helper()
	before := g.tree(t)
	code, body := g.collectRaw(t, repo, false)
	if c, r := decodeErr(t, body); code != http.StatusServiceUnavailable || c != "GC_ABORTED" || r != reason {
		t.Fatalf("real run: %d %s, want 503 GC_ABORTED %s", code, body, reason)
	}
	code, body = g.collectRaw(t, repo, true)
	if code != http.StatusOK {
		t.Fatalf("dry run: %d %s, want 200 with blockers", code, body)
	}
	dry := decodeReport(t, body)
	if !dry.DryRun || dry.Status != gcrun.StatusDone || !hasBlocker(dry, reason, collector.BlocksRun) {
		t.Fatalf("dry run: %s, want blocker %s", body, reason)
	}
	if after := g.tree(t); after != before {
		t.Fatalf("a blocked run changed storage:\n%s", diffLines(before, after))
	}
	return dry
}

func hasBlocker(rep *collector.Report, reason, blocks string) bool {
	for _, b := range rep.Blockers {
		if b.Reason.String() == reason && b.Blocks == blocks && b.Detail != "" {
			return true
		}
	}
	return false
}

func TestE2ERecordingTooShortAborts(t *testing.T) {
	r := registrytest.Start(t, registrytest.WithStorageMiddleware("reclaim", reclaimOptions(t, time.Hour, "")))
	g := &gcRegistry{Registry: r, raw: rawDriver(t, r)}
	push(t, g, "young/app:v1", registrytest.Image(t, layer(t)))
	push(t, g, "young/app:v1", registrytest.Image(t, layer(t)))
	assertBlocked(t, g, "young/app", "redis_recording_too_short")
}

func TestE2EUnparsableManifestAborts(t *testing.T) {
	g := startGC(t)
	push(t, g, "bad/app:v1", registrytest.Image(t, layer(t)))
	push(t, g, "bad/app:v1", registrytest.Image(t, layer(t)))
	junk := []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","layers":`)
	d := digest.FromBytes(junk)
	ctx := t.Context()
	if err := g.raw.PutContent(ctx, layout.BlobDataPath(d), junk); err != nil {
		t.Fatal(err)
	}
	if err := g.raw.PutContent(ctx, layout.RevisionLinkPath("bad/app", d), []byte(d)); err != nil {
		t.Fatal(err)
	}
	g.settle(t)
	assertAbort(t, g, "bad/app", "manifest_unreadable")
}

// TestE2EPushReusingBlobWhileGCDeletesIt forces the two interleavings of a
// push that reuses a blob GC is about to delete: the push lands before the
// blob's fence (GC must see it and keep the blob), or during it (the push
// must wait or fail retryably, and a retry must give a pullable image).
func TestE2EPushReusingBlobWhileGCDeletesIt(t *testing.T) {
	for _, tc := range []struct{ name, method string }{
		{"push before the fence", "Stat"},   // GC's last stat of the blob, before it fences
		{"push during the fence", "Delete"}, // GC holds the fence and is deleting
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := startGC(t)
			shared := layer(t)
			push(t, g, "src/app:v1", registrytest.Image(t, shared))
			push(t, g, "src/app:v1", registrytest.Image(t, layer(t))) // shared is now unreferenced in src
			g.settle(t)
			sharedD := digestOf(t, shared)
			dataPath := layout.BlobDataPath(digest.Digest(sharedD.String()))
			target := dataPath
			if tc.method == "Delete" {
				target = layout.BlobDir(digest.Digest(sharedD.String()))
			}
			var fired atomic.Bool
			pushErr := make(chan error, 1)
			fenced := storagetest.WatchFenced(g.Server.Env().Tracker.Client())
			setHook(t, func(ctx context.Context, method, path string) error {
				if method != tc.method || path != target || !fired.CompareAndSwap(false, true) {
					return nil
				}
				go func() {
					pushErr <- remote.Write(g.Ref(t, "dst/app:v1"), registrytest.Image(t, shared), g.Remote(t)...)
				}()
				if tc.method == "Stat" {
					// Let the push finish before GC goes on to the fence.
					select {
					case err := <-pushErr:
						pushErr <- err
					case <-time.After(10 * time.Second):
						t.Error("push did not finish")
					}
				} else {
					// Hold the delete until the push meets GC's fence.
					select {
					case <-fenced.C:
					case err := <-pushErr:
						pushErr <- err
						t.Error("the push finished without meeting GC's fence")
					case <-time.After(10 * time.Second):
						t.Error("the push never reached the fence")
					}
				}
				return nil
			})
			code, body := g.collectRaw(t, "src/app", false)
			if code != http.StatusOK {
				t.Fatalf("collect: %d %s", code, body)
			}
			rep := decodeReport(t, body)
			if !fired.Load() {
				t.Fatalf("the interleaving never happened: %+v", rep)
			}
			err := <-pushErr
			setHook(t, nil)
			t.Logf("GC deleted the blob: %v; the push: %v", contains(rep.BlobsDeleted, sharedD), err)
			if tc.method == "Stat" && contains(rep.BlobsDeleted, sharedD) {
				t.Fatal("GC deleted a blob a push had just used")
			}
			if err != nil {
				var te *transport.Error
				if !errors.As(err, &te) || (te.StatusCode != http.StatusServiceUnavailable && te.StatusCode != http.StatusTooManyRequests) {
					t.Fatalf("push failed, and not retryably: %v", err)
				}
				if err := remote.Write(g.Ref(t, "dst/app:v1"), registrytest.Image(t, shared), g.Remote(t)...); err != nil {
					t.Fatalf("retried push: %v", err)
				}
			}
			registrytest.AssertPullable(t, g.Registry, "dst/app:v1")
			g.checkLinks(t)
		})
	}
}

func TestE2EAPIErrors(t *testing.T) {
	g := startGC(t, registrytest.WithHtpasswd("admin", "secret"))
	push(t, g, "api/app:v1", registrytest.Image(t, layer(t)))

	anon := func(method, path string) int {
		req, _ := http.NewRequestWithContext(t.Context(), method, g.URL+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		name, method, path string
		auth               bool
		body               string
		status             int
		code               string
	}{
		{"no credentials", "POST", "/gc/v1/repositories/api/app/collect", false, "", 401, "UNAUTHORIZED"},
		{"invalid name", "POST", "/gc/v1/repositories/API/App/collect", true, "", 400, "NAME_INVALID"},
		{"unknown repository", "POST", "/gc/v1/repositories/no/such/collect", true, "", 404, "NAME_UNKNOWN"},
		{"bad parameter", "POST", "/gc/v1/repositories/api/app/collect?dry_run=maybe", true, "", 400, "PARAM_INVALID"},
		{"empty dry_run", "POST", "/gc/v1/repositories/api/app/collect?dry_run=", true, "", 400, "PARAM_INVALID"},
		{"repeated dry_run", "POST", "/gc/v1/repositories/api/app/collect?dry_run=true&dry_run=false", true, "", 400, "PARAM_INVALID"},
		{"unknown parameter", "POST", "/gc/v1/repositories/api/app/collect?force=1", true, "", 400, "PARAM_INVALID"},
		{"bad body", "POST", "/gc/v1/repositories/api/app/collect", true, `{"dry_run":"x"}`, 400, "PARAM_INVALID"},
		{"oversized body", "POST", "/gc/v1/repositories/api/app/collect", true, `{"dry_run":true,"x":"` + strings.Repeat("a", 70<<10) + `"}`, 413, "SIZE_INVALID"},
		{"wrong method", "GET", "/gc/v1/repositories/api/app/collect", true, "", 405, "UNSUPPORTED"},
		{"unknown plan", "POST", "/gc/v1/repositories/api/app/plans/0123456789abcdef01234567/apply", true, "", 404, "PLAN_UNKNOWN"},
		{"bad plan id", "POST", "/gc/v1/repositories/api/app/plans/zzz/apply", true, "", 400, "PARAM_INVALID"},
		{"unknown run", "GET", "/gc/v1/runs/nope", true, "", 404, "RUN_UNKNOWN"},
		{"unknown endpoint", "GET", "/gc/v1/whatever", true, "", 404, "NOT_FOUND"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(t.Context(), tc.method, g.URL+tc.path, strings.NewReader(tc.body))
			if tc.auth {
				req.SetBasicAuth("admin", "secret")
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var e apiErrors
			if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
				t.Fatalf("status %d, body not JSON: %v", resp.StatusCode, err)
			}
			if resp.StatusCode != tc.status || len(e.Errors) != 1 || e.Errors[0].Code != tc.code {
				t.Fatalf("got %d %+v, want %d %s", resp.StatusCode, e, tc.status, tc.code)
			}
			if tc.status == 401 && resp.Header.Get("WWW-Authenticate") == "" {
				t.Fatal("401 without a challenge")
			}
		})
	}
	if code := anon("GET", "/gc/v1/status"); code != 401 {
		t.Fatalf("status without credentials: %d", code)
	}
}

func TestE2EBusyRepository(t *testing.T) {
	g := startGC(t)
	push(t, g, "busy/app:v1", registrytest.Image(t, layer(t)))
	g.settle(t)
	reached := make(chan struct{})
	release := make(chan struct{})
	var fired atomic.Bool
	setHook(t, func(ctx context.Context, method, path string) error {
		if method == "GetContent" && strings.Contains(path, "/busy/app/_manifests/tags/") && fired.CompareAndSwap(false, true) {
			close(reached)
			<-release
		}
		return nil
	})
	done := make(chan int)
	go func() {
		code, _ := g.collectRaw(t, "busy/app", false)
		done <- code
	}()
	<-reached
	code, body := g.collectRaw(t, "busy/app", false)
	close(release)
	if code != http.StatusConflict {
		t.Fatalf("second run: %d %s", code, body)
	}
	if c, _ := decodeErr(t, body); c != "GC_BUSY" {
		t.Fatalf("code %s", c)
	}
	if first := <-done; first != http.StatusOK {
		t.Fatalf("first run: %d", first)
	}
}

func TestE2EPlanApplyAsyncStatus(t *testing.T) {
	g := startGC(t)
	a := push(t, g, "plan/app:v1", registrytest.Image(t, layer(t)))
	b := push(t, g, "plan/app:v1", registrytest.Image(t, layer(t))) // a untagged
	push(t, g, "plan/app:v1", registrytest.Image(t, layer(t)))      // b untagged
	g.settle(t)

	before := g.tree(t)
	code, body := g.post(t, "/gc/v1/repositories/plan/app/plan")
	if code != http.StatusOK {
		t.Fatalf("plan: %d %s", code, body)
	}
	var resp struct {
		Plan struct {
			ID        string          `json:"plan_id"`
			Manifests []digest.Digest `json:"manifests"`
		} `json:"plan"`
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		t.Fatal(err)
	}
	if len(resp.Plan.Manifests) != 2 || g.tree(t) != before {
		t.Fatalf("plan: %+v", resp.Plan)
	}
	if r := g.Do(t, http.MethodGet, "/gc/v1/plans/"+resp.Plan.ID, nil); r.StatusCode != 200 {
		t.Fatalf("get plan: %d", r.StatusCode)
	}
	// b gets tagged again after the plan: applying must keep it.
	registrytest.Tag(t, g.Registry, "plan/app@"+b.String(), "back")
	code, body = g.post(t, "/gc/v1/repositories/plan/app/plans/"+resp.Plan.ID+"/apply?dry_run=false")
	if code != http.StatusOK {
		t.Fatalf("apply: %d %s", code, body)
	}
	rep := decodeReport(t, body)
	if !contains(rep.ManifestsDeleted, a) || contains(rep.ManifestsDeleted, b) {
		t.Fatalf("apply: %v", rep.ManifestsDeleted)
	}
	changed := false
	for _, c := range rep.Changed {
		changed = changed || c.Digest.String() == b.String()
	}
	if !changed {
		t.Fatalf("b not reported as changed: %+v", rep.Changed)
	}
	g.checkLinks(t)

	// Asynchronous run, then its report.
	code, body = g.post(t, "/gc/v1/repositories/plan/app/collect?async=true&dry_run=true")
	if code != http.StatusAccepted {
		t.Fatalf("async: %d %s", code, body)
	}
	var acc struct {
		RunID string `json:"run_id"`
	}
	_ = json.Unmarshal(body, &acc)
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := g.Do(t, http.MethodGet, "/gc/v1/runs/"+acc.RunID, nil)
		var got struct{ Status string }
		_ = json.NewDecoder(r.Body).Decode(&got)
		r.Body.Close()
		if got.Status == "done" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("async run stuck in %q", got.Status)
		}
		time.Sleep(20 * time.Millisecond)
	}
	r := g.Do(t, http.MethodGet, "/gc/v1/status", nil)
	var st map[string]any
	_ = json.NewDecoder(r.Body).Decode(&st)
	r.Body.Close()
	if r.StatusCode != 200 || st["redis"] != "ok" || st["linkdb_complete"] != true {
		t.Fatalf("status %d %v", r.StatusCode, st)
	}
}

func TestE2EDisabledByDefault(t *testing.T) {
	opts := reclaimOptions(t, e2eWindow, "")
	delete(opts, "gc")
	r := registrytest.Start(t, registrytest.WithStorageMiddleware("reclaim", opts))
	resp := r.Do(t, http.MethodPost, "/gc/v1/repositories/x/collect", nil)
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("disabled GC: %d", resp.StatusCode)
	}
}

// TestE2EMountWhileGCUnlinksSource: a cross-repository mount of a blob
// whose source link GC is deleting must either not mount (the client then
// uploads) or keep the blob alive; never a link to a deleted blob.
func TestE2EMountWhileGCUnlinksSource(t *testing.T) {
	g := startGC(t)
	shared := layer(t)
	push(t, g, "msrc/app:v1", registrytest.Image(t, shared))
	push(t, g, "msrc/app:v1", registrytest.Image(t, layer(t)))
	g.settle(t)
	sharedD := digestOf(t, shared)
	target := layout.LayerLinkPath("msrc/app", digest.Digest(sharedD.String()))
	target = target[:strings.LastIndex(target, "/")] // GC deletes the link's directory
	var fired atomic.Bool
	mount := make(chan int, 1)
	setHook(t, func(ctx context.Context, method, path string) error {
		if method == "Delete" && path == target && fired.CompareAndSwap(false, true) {
			mount <- registrytest.TryMountBlob(t, g.Registry, "msrc/app", "mdst/app", sharedD)
		}
		return nil
	})
	code, body := g.collectRaw(t, "msrc/app", false)
	if code != http.StatusOK || !fired.Load() {
		t.Fatalf("collect: %d %s (hook fired: %v)", code, body, fired.Load())
	}
	setHook(t, nil)
	rep := decodeReport(t, body)
	status := <-mount
	t.Logf("mount answered %d; GC deleted the blob: %v", status, contains(rep.BlobsDeleted, sharedD))
	if status == http.StatusCreated && contains(rep.BlobsDeleted, sharedD) {
		t.Fatal("GC deleted a blob that was just mounted into another repository")
	}
	push(t, g, "mdst/app:v1", registrytest.Image(t, shared))
	registrytest.AssertPullable(t, g.Registry, "mdst/app:v1")
	g.checkLinks(t)
}
