package console_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/gc/collector"
	"github.com/reclaim-registry/reclaim/reclaim/gcrun"
	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/retention"
	"github.com/reclaim-registry/reclaim/storage/linkdb"
)

// window is the test registry's protection window: long enough that a push
// and the collect right after it fall inside it (the refusal), short enough
// to wait out.
const window = 2 * time.Second

const user, password = "operator", "s3cret"

// fixture is a registry with real data: pushes, a tag delete, a collect
// that deleted something, a collect that was refused, a run whose process
// died (interrupted), and a repository whose preview has objects to delete.
type fixture struct {
	*registrytest.Registry
	collected *collector.Report // the real collect of team/app
	blocked   *collector.Report // the dry run of team/base that a blocker would have refused
	applied   *retention.ApplyReport
	killed    digest.Digest // the blob the interrupted run of team/base was deleting
}

// startRegistry starts an empty registry with htpasswd auth, GC on and its
// link database complete; each of with may change the reclaim options.
func startRegistry(t *testing.T, with ...func(opts map[string]any)) *registrytest.Registry {
	t.Helper()
	opts := map[string]any{"window": window.String(), "dedup": "10ms", "gc": map[string]any{"enabled": true},
		// On, so the overview shows it, but slow: it must not race the collects.
		"reclaimer": map[string]any{"enabled": true, "interval": "1h"}}
	if addr := os.Getenv("RECLAIM_TEST_REDIS_ADDR"); addr != "" {
		opts["redis"] = map[string]any{"addrs": []any{addr}}
		opts["prefix"] = fmt.Sprintf("console-test-%d:", time.Now().UnixNano())
	}
	for _, w := range with {
		w(opts)
	}
	r := registrytest.Start(t, registrytest.WithHtpasswd(user, password), registrytest.WithStorageMiddleware("reclaim", opts))
	if err := linkdb.MarkLinkDBComplete(t.Context(), r.Server.Env().Raw, time.Now()); err != nil {
		t.Fatal(err)
	}
	return r
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	r := startRegistry(t)
	f := &fixture{Registry: r}
	registrytest.PushImage(t, r, "team/base:latest", 1)
	// Recording began less than a window ago: GC refuses, and says why.
	code, body := f.api(t, http.MethodPost, "/gc/v1/repositories/team/base/collect?dry_run=false")
	if code != http.StatusServiceUnavailable {
		t.Fatalf("collect right after start: %d %s; want 503 redis_recording_too_short", code, body)
	}
	// A dry run now plans, and lists the same refusal as its blocker.
	code, body = f.api(t, http.MethodPost, "/gc/v1/repositories/team/base/collect?dry_run=true")
	f.blocked = &collector.Report{}
	if err := json.Unmarshal(body, f.blocked); code != http.StatusOK || err != nil || len(f.blocked.Blockers) == 0 {
		t.Fatalf("dry run right after start: %d %s; want 200 with a blocker", code, body)
	}
	registrytest.PushImage(t, r, "team/base:old", 1)
	registrytest.PushImage(t, r, "team/app:v1", 2)
	v2 := registrytest.PushImage(t, r, "team/app:v2", 1)
	settle(t, r)
	for _, ref := range []string{"team/app/manifests/v1", "team/base/manifests/old"} {
		if code, body := f.api(t, http.MethodDelete, "/v2/"+ref); code != http.StatusAccepted {
			t.Fatalf("DELETE %s: %d %s", ref, code, body)
		}
	}
	settle(t, r)
	code, body = f.api(t, http.MethodPost, "/gc/v1/repositories/team/app/collect?dry_run=false")
	if code != http.StatusOK {
		t.Fatalf("collect team/app: %d %s", code, body)
	}
	f.collected = &collector.Report{}
	if err := json.Unmarshal(body, f.collected); err != nil {
		t.Fatal(err)
	}
	if len(f.collected.ManifestsDeleted) != 1 || len(f.collected.BlobsDeleted) < 3 || f.collected.BytesFreed == 0 {
		t.Fatalf("collect of team/app deleted %d manifests, %d blobs, %d bytes; want the untagged v1 and its blobs",
			len(f.collected.ManifestsDeleted), len(f.collected.BlobsDeleted), f.collected.BytesFreed)
	}
	f.killed = f.killedRun(t, "team/base")
	f.abortedRetention(t, "team/base")
	f.retentionPlan(t, "team/app", v2)
	return f
}

// retentionPlan declares inUse deployed and stores a retention plan of
// repo (a preview: it deletes nothing).
func (f *fixture) retentionPlan(t *testing.T, repo string, inUse v1.Image) {
	t.Helper()
	d, err := inUse.Digest()
	if err != nil {
		t.Fatal(err)
	}
	src := fmt.Sprintf(`{"images":[{"repository":%q,"digest":%q}]}`, repo, d.String())
	if code, body := f.send(t, http.MethodPut, "/gc/v1/inuse/sources/deploys", src); code != http.StatusOK {
		t.Fatalf("declare the in-use images: %d %s", code, body)
	}
	code, body := f.send(t, http.MethodPost, "/gc/v1/repositories/"+repo+"/retention/preview", "")
	if code != http.StatusOK {
		t.Fatalf("retention preview of %s: %d %s", repo, code, body)
	}
	var plan retention.Plan
	if err := json.Unmarshal(body, &plan); err != nil {
		t.Fatal(err)
	}
	code, body = f.send(t, http.MethodPost, "/gc/v1/repositories/"+repo+"/retention/plans/"+plan.ID+"/apply", "{}")
	f.applied = &retention.ApplyReport{}
	if err := json.Unmarshal(body, f.applied); code != http.StatusOK || err != nil {
		t.Fatalf("retention apply of %s: %d %s", repo, code, body)
	}
}

// abortedRetention asks for a retention preview while no source declares
// anything: the in-use index is empty, and the preview aborts.
func (f *fixture) abortedRetention(t *testing.T, repo string) {
	t.Helper()
	if code, body := f.send(t, http.MethodPost, "/gc/v1/repositories/"+repo+"/retention/preview", ""); code != http.StatusServiceUnavailable {
		t.Fatalf("retention preview of %s with no in-use source: %d %s; want 503 inuse_empty", repo, code, body)
	}
}

// killedRun leaves a run record on repo as a process killed in its blobs
// step leaves it: running, a blob written ahead of its delete, and its lock
// gone (here released; a dead process stops renewing it). The first reader
// marks it interrupted. It returns the blob.
func (f *fixture) killedRun(t *testing.T, repo string) digest.Digest {
	t.Helper()
	ctx := t.Context()
	blob := digest.FromString("the blob the killed run was deleting")
	l, err := f.Server.Env().Tracker.BeginRun(ctx, repo, killedRunID, time.Now(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	err = l.Progress(ctx, gcrun.Progress{Step: "blobs", Kind: "blob", Object: blob.String(), Deleting: true})
	l.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	return blob
}

// killedRunID is the id of the fixture's interrupted run.
const killedRunID = "01killedbythefixture"

// settle makes everything done so far older than the window, on the Redis
// clock the window is timed by (registrytest.Registry.Age).
func settle(t *testing.T, r *registrytest.Registry) {
	t.Helper()
	r.Age(t, window+200*time.Millisecond)
}

// api sends a request as the operator and returns the status and body.
func (f *fixture) api(t *testing.T, method, path string) (int, []byte) {
	t.Helper()
	return f.send(t, method, path, "")
}

// send is api with a JSON body.
func (f *fixture) send(t *testing.T, method, path, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, f.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth(user, password)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, b := fetch(t, req)
	return resp.StatusCode, b
}

// fetch sends req and returns the response (its body read and closed)
// and the whole body.
func fetch(t *testing.T, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}
