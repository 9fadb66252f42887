package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/opencontainers/go-digest"
	"github.com/redis/go-redis/v9"

	"github.com/reclaim-registry/reclaim/gc/collector"
	"github.com/reclaim-registry/reclaim/reclaim/gcrun"
	"github.com/reclaim-registry/reclaim/redisstate"
	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/storage/linkdb"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

// haltEnv is the registry's test hook (registry/gchalt.go, in binaries
// built with -tags reclaim_testhooks, as registrytest.Binary builds them):
// collections halt at their first blob delete and say so in a file.
const haltEnv = "RECLAIM_TEST_HALT_GC_DELETE"

// A `registry serve` process is SIGKILLed in the middle of a collection,
// halted at its first blob delete (after the run unlinked the image's
// blobs). A new process on the same storage and Redis reads the run as
// interrupted, with its step, last object and deletions started, and the
// next collection reconciles it: it queues the blobs left orphaned and
// says so in its report.
func TestKilledCollectIsInterrupted(t *testing.T) {
	const window = time.Minute
	p, rc, prefix, marker := startHalting(t, window)
	r := p.Registry

	registrytest.PushImage(t, r, "crash/app:keep", 1)
	registrytest.PushImage(t, r, "crash/app:v1", 2)
	if err := remote.Delete(r.Ref(t, "crash/app:v1"), r.Remote(t)...); err != nil {
		t.Fatal(err)
	}
	// A window passes without access (the epoch and every record move back).
	storagetest.Age(t, rc, prefix, 2*window)

	var started struct {
		RunID string `json:"run_id"`
	}
	gcJSON(t, r, http.MethodPost, "/gc/v1/repositories/crash/app/collect?dry_run=false&async=true", http.StatusAccepted, &started)
	waitFile(t, marker)
	live := runReport(t, r, started.RunID)
	if live.Status != gcrun.StatusRunning || live.Step != gcrun.StepBlobs {
		t.Fatalf("halted run: status %s step %s, want running in blobs", live.Status, live.Step)
	}

	p.Kill(t)
	t.Setenv(haltEnv, "")
	// The dead run's lock outlives it by its lease (a minute); a lock
	// that expired is a lock that is gone.
	if n := rc.Del(context.Background(), prefix+"run:crash/app").Val(); n != 1 {
		t.Fatalf("the killed run's lock: %d keys deleted, want 1", n)
	}
	p.Restart(t)

	var raw1 map[string]any
	gcJSON(t, r, http.MethodGet, "/gc/v1/runs/"+started.RunID, http.StatusOK, &raw1)
	in, _ := raw1["interruption"].(map[string]any)
	if raw1["status"] != "interrupted" || in == nil || in["step"] != "blobs" || in["deletions_started"] != true {
		t.Fatalf("killed run after restart: %v", raw1)
	}
	last, _ := in["last_object"].(map[string]any)
	if last == nil || last["kind"] != "blob" {
		t.Fatalf("last object: %v", in["last_object"])
	}
	lastBlob := digest.Digest(last["digest"].(string))
	if m := metrics(t, p); !strings.Contains(m, "\nreclaim_gc_runs_interrupted_total 1\n") {
		t.Errorf("the instance that marked the run does not count it:\n%s", m)
	}

	var next collector.Report
	gcJSON(t, r, http.MethodPost, "/gc/v1/repositories/crash/app/collect?dry_run=false", http.StatusOK, &next)
	if len(next.Reconciled) != 1 || next.Reconciled[0].RunID != started.RunID {
		t.Fatalf("the next collect reconciled %+v", next.Reconciled)
	}
	rec := next.Reconciled[0]
	// Halted before its first blob delete reached the storage: the image's
	// config and layers and its manifest's blob are unlinked and whole.
	if len(rec.OrphansQueued) != 4 || !slices.Contains(rec.OrphansQueued, lastBlob) {
		t.Fatalf("orphans queued %v (last object %s), rechecked %+v", rec.OrphansQueued, lastBlob, rec.Rechecked)
	}
	q := redisstate.NewQueue(rc, prefix, 0)
	for _, b := range rec.OrphansQueued {
		if ok, err := q.Contains(context.Background(), b); err != nil || !ok {
			t.Fatalf("orphan %s not in the review queue: %v", b, err)
		}
	}
	after := runReport(t, r, started.RunID)
	if after.Status != gcrun.StatusInterrupted || after.Interruption.ReconciledBy != next.RunID {
		t.Fatalf("killed run after the reconciliation: %+v", after.Interruption)
	}
	registrytest.AssertPullable(t, r, "crash/app:keep")
}

// startHalting starts a registry process whose collections halt at their
// first blob delete, on a fresh storage (link database complete) and the
// test's Redis (real when configured, else miniredis) under a prefix of its
// own. marker is the file the halt writes.
func startHalting(t *testing.T, window time.Duration) (p *registrytest.Process, rc *redis.Client, prefix, marker string) {
	t.Helper()
	addr := storagetest.RealRedis()
	if addr != "" {
		prefix = storagetest.RealPrefix(t, addr)
	} else {
		addr, prefix = miniredis.RunT(t).Addr(), "e2e:"
	}
	rc = redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { rc.Close() })
	root := t.TempDir()
	raw, err := filesystem.FromParameters(map[string]any{"rootdirectory": root})
	if err != nil {
		t.Fatal(err)
	}
	if err := linkdb.MarkLinkDBComplete(context.Background(), raw, time.Now()); err != nil {
		t.Fatal(err)
	}
	marker = filepath.Join(t.TempDir(), "halted")
	t.Setenv(haltEnv, marker)
	p = registrytest.StartProcess(t, registrytest.WithRootDirectory(root),
		registrytest.WithStorageMiddleware("reclaim", map[string]any{
			"window": window.String(), "prefix": prefix, "redis": map[string]any{"addrs": []any{addr}},
			"gc": map[string]any{"enabled": true},
		}))
	return p, rc, prefix, marker
}

func metrics(t *testing.T, p *registrytest.Process) string {
	t.Helper()
	resp, err := http.Get(p.DebugURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func runReport(t *testing.T, r *registrytest.Registry, id string) collector.Report {
	t.Helper()
	var rep collector.Report
	gcJSON(t, r, http.MethodGet, "/gc/v1/runs/"+id, http.StatusOK, &rep)
	return rep
}

func gcJSON(t *testing.T, r *registrytest.Registry, method, path string, want int, out any) {
	t.Helper()
	resp := r.Do(t, method, path, nil)
	defer resp.Body.Close()
	if resp.StatusCode != want {
		var body map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&body)
		t.Fatalf("%s %s: %d %v, want %d", method, path, resp.StatusCode, body, want)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
}

// waitFile waits for the registry process to write path (an external
// process: polled, with a deadline).
func waitFile(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("the collection did not reach its first blob delete within 30s " +
		"(a $RECLAIM_TEST_REGISTRY_BINARY must be built with -tags reclaim_testhooks)")
}
