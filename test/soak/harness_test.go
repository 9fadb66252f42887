package soak

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distribution/distribution/v3/configuration"
	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/opencontainers/go-digest"
	"github.com/redis/go-redis/v9"

	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/linkdb"
)

var soakDuration = flag.Duration("soak.duration", 0, "workload duration of TestSoak (default 30s, env RECLAIM_SOAK_DURATION)")

func TestMain(m *testing.M) { registrytest.Main(m) }

// workloadDuration is the -soak.duration flag, else $RECLAIM_SOAK_DURATION,
// else def.
func workloadDuration(t *testing.T, def time.Duration) time.Duration {
	if *soakDuration > 0 {
		return *soakDuration
	}
	if v := os.Getenv("RECLAIM_SOAK_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("RECLAIM_SOAK_DURATION=%q: %v", v, err)
		}
		return d
	}
	return def
}

// window is W for every soak registry: long enough for a push or a pull to
// finish inside it on a loaded CI machine, short enough to wait out often.
const window = 3 * time.Second

// reclaimInterval is the reclaimer's tick in the soak registries.
const reclaimInterval = 300 * time.Millisecond

func randomPrefix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "soak-" + hex.EncodeToString(b[:]) + ":"
}

// middlewareOptions are the reclaim middleware options of every instance.
func middlewareOptions(redisAddr, prefix string) map[string]any {
	return map[string]any{
		"window":        window.String(),
		"dedup":         "50ms",
		"epochinterval": "1s",
		"prefix":        prefix,
		"redis":         map[string]any{"addrs": []any{redisAddr}},
		"gc":            map[string]any{"enabled": true},
		"reclaimer":     map[string]any{"enabled": true, "interval": reclaimInterval.String(), "batch": 50, "lease": "3s"},
	}
}

// quiet keeps the registry logs to warnings: a failing soak attaches them.
var quiet = registrytest.WithConfig(func(c *configuration.Configuration) { c.Log.Level = "warn" })

// cluster is N registry instances on one storage root and one Redis.
type cluster struct {
	root      string
	raw       storagedriver.StorageDriver
	redisAddr string
	prefix    string
	regs      []*registrytest.Registry
	procs     []*registrytest.Process // nil entries for in-process instances
}

// prepareStorage marks the (empty) link database complete: the registries
// start on empty storage with the middleware, so it is complete from the
// start.
func prepareStorage(t *testing.T) (string, storagedriver.StorageDriver) {
	t.Helper()
	root := t.TempDir()
	raw, err := filesystem.FromParameters(map[string]any{"rootdirectory": root})
	if err != nil {
		t.Fatal(err)
	}
	if err := linkdb.MarkLinkDBComplete(context.Background(), raw, time.Now()); err != nil {
		t.Fatal(err)
	}
	return root, raw
}

func (c *cluster) pick(i int) *registrytest.Registry { return c.regs[i%len(c.regs)] }

func (c *cluster) redis() *redis.Client { return redis.NewClient(&redis.Options{Addr: c.redisAddr}) }

// cleanupRedis deletes the run's keys from a shared Redis.
func cleanupRedis(addr, prefix string) {
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	ctx := context.Background()
	iter := rc.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		rc.Del(ctx, iter.Val())
	}
}

// counters is a set of named counts, safe for concurrent use.
type counters struct {
	mu sync.Mutex
	m  map[string]int64
}

func (c *counters) add(k string, n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]int64{}
	}
	c.m[k] += n
}

func (c *counters) get(k string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[k]
}

func (c *counters) sum(prefix string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int64
	for k, v := range c.m {
		if strings.HasPrefix(k, prefix) {
			n += v
		}
	}
	return n
}

func (c *counters) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	keys := make([]string, 0, len(c.m))
	for k := range c.m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "  %-48s %d\n", k, c.m[k])
	}
	return b.String()
}

// errorClass names an error by what a client would see: "<status> <CODE>"
// for registry errors, a short label otherwise.
func errorClass(err error) string {
	var te *transport.Error
	if errors.As(err, &te) {
		code := "-"
		if len(te.Errors) > 0 {
			code = string(te.Errors[0].Code)
		}
		return fmt.Sprintf("%d %s", te.StatusCode, code)
	}
	var ve *verifyError
	if errors.As(err, &ve) {
		return ve.class
	}
	var cr *collectRefused
	if errors.As(err, &cr) {
		return cr.reason
	}
	s := err.Error()
	switch {
	case strings.Contains(s, "connection refused"), strings.Contains(s, "EOF"), strings.Contains(s, "connection reset"):
		return "connection"
	case strings.Contains(s, "unexpected status code"):
		return s[strings.Index(s, "unexpected status code"):]
	}
	if len(s) > 60 {
		s = s[:60]
	}
	return "other: " + s
}

// retryable reports whether a push error is a refusal the client should
// retry (the fence protocol's 503/429, a busy instance), not a failure.
func retryable(err error) bool {
	var te *transport.Error
	if errors.As(err, &te) {
		return te.StatusCode == http.StatusServiceUnavailable || te.StatusCode == http.StatusTooManyRequests
	}
	return false
}

// lossClass reports whether a pull failure means referenced data is gone.
func lossClass(class string) bool {
	return strings.Contains(class, "BLOB_UNKNOWN") || strings.Contains(class, "digest_mismatch") ||
		strings.Contains(class, "child_missing") || strings.Contains(class, "404 -")
}

// remoteOpts are the client options: no retries inside ggcr, so that every
// refusal is seen and counted here.
func remoteOpts(ctx context.Context, r *registrytest.Registry) []remote.Option {
	auth := authn.Anonymous
	if r.Username != "" {
		auth = &authn.Basic{Username: r.Username, Password: r.Password}
	}
	return []remote.Option{remote.WithContext(ctx), remote.WithAuth(auth),
		remote.WithRetryBackoff(remote.Backoff{Steps: 1}), remote.WithJobs(2)}
}

func ref(r *registrytest.Registry, s string) (name.Reference, error) {
	return name.ParseReference(r.Host+"/"+s, name.Insecure, name.StrictValidation)
}

type verifyError struct {
	class  string
	detail string
	// missing is the manifest or blob that was not there, when known.
	missing v1.Hash
}

func (e *verifyError) Error() string { return e.class + ": " + e.detail }

// pullVerify pulls ref (an image or an index, recursively) from r and reads
// every blob, checking its digest. It returns the manifest digest.
func pullVerify(ctx context.Context, r *registrytest.Registry, repo, reference string) (v1.Hash, error) {
	rf, err := ref(r, repo+reference)
	if err != nil {
		return v1.Hash{}, err
	}
	opts := remoteOpts(ctx, r)
	desc, err := remote.Get(rf, opts...)
	if err != nil {
		return v1.Hash{}, err
	}
	if got := sha256Hex(desc.Manifest); "sha256:"+got != desc.Digest.String() {
		return desc.Digest, &verifyError{"digest_mismatch", "manifest " + desc.Digest.String(), desc.Digest}
	}
	if desc.MediaType.IsIndex() {
		idx, err := desc.ImageIndex()
		if err != nil {
			return desc.Digest, err
		}
		im, err := idx.IndexManifest()
		if err != nil {
			return desc.Digest, err
		}
		for _, child := range im.Manifests {
			if _, err := pullVerify(ctx, r, repo, "@"+child.Digest.String()); err != nil {
				if strings.Contains(errorClass(err), "MANIFEST_UNKNOWN") {
					return desc.Digest, &verifyError{"child_missing", fmt.Sprintf("index %s child %s: %v", desc.Digest, child.Digest, err), child.Digest}
				}
				return desc.Digest, err
			}
		}
		return desc.Digest, nil
	}
	var m v1.Manifest
	if err := json.Unmarshal(desc.Manifest, &m); err != nil {
		return desc.Digest, err
	}
	blobs := append([]v1.Descriptor{m.Config}, m.Layers...)
	for _, b := range blobs {
		if err := fetchBlob(ctx, r, repo, b.Digest); err != nil {
			return desc.Digest, err
		}
	}
	return desc.Digest, nil
}

// fetchBlob GETs a blob and checks its digest.
func fetchBlob(ctx context.Context, r *registrytest.Registry, repo string, d v1.Hash) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.URL+"/v2/"+repo+"/blobs/"+d.String(), nil)
	if err != nil {
		return err
	}
	if r.Username != "" {
		req.SetBasicAuth(r.Username, r.Password)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		class := fmt.Sprintf("%d -", resp.StatusCode)
		var body struct {
			Errors []struct{ Code string } `json:"errors"`
		}
		if json.Unmarshal(b, &body) == nil && len(body.Errors) > 0 {
			class = fmt.Sprintf("%d %s", resp.StatusCode, body.Errors[0].Code)
		}
		return &verifyError{class, "blob " + d.String() + " of " + repo, d}
	}
	h := sha256.New()
	if _, err := io.Copy(h, resp.Body); err != nil {
		return err
	}
	if "sha256:"+hex.EncodeToString(h.Sum(nil)) != d.String() {
		return &verifyError{"digest_mismatch", "blob " + d.String(), d}
	}
	return nil
}

func sha256Hex(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// listTags returns repo's tags (none when the repository is gone).
func listTags(ctx context.Context, r *registrytest.Registry, repo string) ([]string, error) {
	rp, err := name.NewRepository(r.Host+"/"+repo, name.Insecure)
	if err != nil {
		return nil, err
	}
	tags, err := remote.List(rp, remoteOpts(ctx, r)...)
	var te *transport.Error
	if errors.As(err, &te) && te.StatusCode == http.StatusNotFound {
		return nil, nil
	}
	return tags, err
}

// referrers lists the referrer digests of subject in repo.
func referrers(ctx context.Context, r *registrytest.Registry, repo string, subject v1.Hash) ([]v1.Hash, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.URL+"/v2/"+repo+"/referrers/"+subject.String(), nil)
	if err != nil {
		return nil, err
	}
	if r.Username != "" {
		req.SetBasicAuth(r.Username, r.Password)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("referrers of %s: %d", subject, resp.StatusCode)
	}
	var idx v1.IndexManifest
	if err := json.NewDecoder(resp.Body).Decode(&idx); err != nil {
		return nil, err
	}
	out := make([]v1.Hash, 0, len(idx.Manifests))
	for _, m := range idx.Manifests {
		out = append(out, m.Digest)
	}
	return out, nil
}

// verifyAll pulls every tag of every repository and every referrer of every
// tagged manifest. With no workload running, every failure is a loss. With a
// racing workload (w, else nil), a tag whose manifest is unknown is excused
// when it points at a manifest the workload PUT to it while a DELETE of that
// manifest ran, and every tagged manifest must also have its blobs linked in
// its repository in storage (else GC does not protect them). It returns the
// images verified and the tags excused.
func verifyAll(ctx context.Context, t *testing.T, r *registrytest.Registry, repos []string, w *workload) (images, excused int) {
	t.Helper()
	for _, repo := range repos {
		tags, err := listTags(ctx, r, repo)
		if err != nil {
			t.Errorf("list tags of %s: %v", repo, err)
			continue
		}
		for _, tag := range tags {
			d, err := pullVerify(ctx, r, repo, ":"+tag)
			if err != nil && strings.Contains(err.Error(), "unknown tag=") {
				// The tag directory exists without a current link: a tag
				// write or delete failed half-way (upstream behaviour under
				// storage faults). It references nothing. A tag whose
				// manifest is gone says "unknown manifest" instead.
				t.Logf("dangling tag directory %s:%s (no current link)", repo, tag)
				continue
			}
			if err != nil && w != nil && strings.Contains(errorClass(err), "MANIFEST_UNKNOWN") {
				m, ok := w.danglingOK(repo, tag)
				if ok {
					// never partially present: the manifest itself is gone
					t.Logf("dangling tag %s:%s -> %s (its PUT raced a DELETE of that manifest)", repo, tag, m)
					excused++
					continue
				}
				err = fmt.Errorf("%w (tag -> %s, not a manifest whose PUT raced its DELETE)", err, m)
			}
			if err != nil {
				t.Errorf("LOST DATA: %s:%s (%s): %v", repo, tag, errorClass(err), err)
				continue
			}
			if w != nil {
				missing, err := w.unlinked(ctx, repo, digest.Digest(d.String()), 0)
				if err != nil || len(missing) > 0 {
					t.Errorf("%s:%s -> %s pulls, but %s does not link %v (%v): GC does not protect them", repo, tag, d, repo, missing, err)
				}
			}
			images++
			refs, err := referrers(ctx, r, repo, d)
			if err != nil {
				t.Errorf("%s:%s: %v", repo, tag, err)
				continue
			}
			for _, rd := range refs {
				if _, err := pullVerify(ctx, r, repo, "@"+rd.String()); err != nil {
					t.Errorf("LOST DATA: referrer %s of %s:%s (%s): %v", rd, repo, tag, errorClass(err), err)
					continue
				}
				images++
			}
		}
	}
	return images, excused
}

// linkdbVerify runs `linkdb verify` on the shared storage.
func linkdbVerify(ctx context.Context, t *testing.T, raw storagedriver.StorageDriver) *linkdb.Report {
	t.Helper()
	rep, err := linkdb.Verify(ctx, raw, linkdb.VerifyOptions{Workers: 2})
	if err != nil {
		t.Fatalf("linkdb verify: %v", err)
	}
	return rep
}

func summarize(rep *linkdb.Report) string {
	var b strings.Builder
	fmt.Fprintf(&b, "exit=%d blobs=%d forward=%d reverse=%d", rep.ExitCode, rep.Blobs, rep.ForwardLinks, rep.ReverseLinks)
	for _, k := range linkdb.Kinds {
		if n := rep.Counts[k]; n > 0 {
			fmt.Fprintf(&b, " %s=%d", k, n)
		}
	}
	for i, f := range rep.Findings {
		if i == 5 {
			break
		}
		fmt.Fprintf(&b, "\n    %+v", f)
	}
	return b.String()
}

// gcStatus is the part of GET /gc/v1/status the soak reads.
type gcStatus struct {
	Reclaimer struct {
		Enabled        bool             `json:"enabled"`
		Reviewed       int64            `json:"reviewed"`
		Deleted        int64            `json:"deleted"`
		BytesFreed     int64            `json:"bytes_freed"`
		QueueLength    int64            `json:"queue_length"`
		Due            int64            `json:"due"`
		KeptBy         map[string]int64 `json:"kept_by_reason"`
		DeletedBy      map[string]int64 `json:"deleted_by_reason"`
		FailedTicks    int64            `json:"failed_ticks"`
		LastError      string           `json:"last_error"`
		LastAbort      string           `json:"last_abort"`
		ReviewedPerSec float64          `json:"reviewed_per_second"`
	} `json:"reclaimer"`
}

func status(ctx context.Context, r *registrytest.Registry) (gcStatus, error) {
	var st gcStatus
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.URL+"/gc/v1/status", nil)
	if err != nil {
		return st, err
	}
	if r.Username != "" {
		req.SetBasicAuth(r.Username, r.Password)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	err = json.NewDecoder(resp.Body).Decode(&st)
	return st, err
}

// collect runs one real, synchronous collection through r's GC API and returns
// the HTTP status and the report's bytes_freed.
func collect(ctx context.Context, r *registrytest.Registry, repo string) (int, int64, error) {
	rep, err := collectFull(ctx, r, repo)
	switch {
	case rep == nil:
		return 0, 0, err
	case err != nil:
		return rep.code, 0, err
	}
	return rep.code, rep.BytesFreed, nil
}

// collectFull runs one real (dry_run=false), synchronous collection and
// returns its report; a collect answered with an error body is a
// *collectRefused.
func collectFull(ctx context.Context, r *registrytest.Registry, repo string) (*collectReport, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.URL+"/gc/v1/repositories/"+repo+"/collect?dry_run=false", nil)
	if err != nil {
		return nil, err
	}
	if r.Username != "" {
		req.SetBasicAuth(r.Username, r.Password)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	rep := &collectReport{code: resp.StatusCode}
	_ = json.NewDecoder(resp.Body).Decode(rep)
	if resp.StatusCode >= 400 && len(rep.Errors) > 0 {
		reason := rep.Errors[0].Code
		if r, ok := rep.Errors[0].Detail["reason"].(string); ok {
			reason += " " + r
		}
		return rep, &collectRefused{reason}
	}
	return rep, nil
}

// collectRefused is a collect answered with an error body.
type collectRefused struct{ reason string }

func (e *collectRefused) Error() string { return e.reason }

// finalPass waits out the window, collects every repository (twice: what
// the first run kept as recently accessed by the verification pulls goes in
// the second) and lets the reclaimers drain the queue.
func finalPass(ctx context.Context, t *testing.T, c *cluster, repos []string) {
	t.Helper()
	for round := range 2 {
		time.Sleep(window + 500*time.Millisecond)
		for i, repo := range repos {
			code, _, err := collect(ctx, c.pick(i+round), repo)
			if code != http.StatusOK && code != http.StatusNotFound {
				t.Logf("final collect %s: %d %v", repo, code, err)
			}
		}
	}
	time.Sleep(window + 500*time.Millisecond)
	deadline := time.Now().Add(30 * time.Second)
	for {
		due := int64(0)
		for _, r := range c.regs {
			st, err := status(ctx, r)
			if err == nil {
				due = max(due, st.Reclaimer.Due)
			}
		}
		if due == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(reclaimInterval)
	}
	// one more tick on every instance after the last due item was claimed
	time.Sleep(3 * reclaimInterval)
}

func remoteWrite(ctx context.Context, rf name.Reference, img v1.Image, r *registrytest.Registry) error {
	return remote.Write(rf, img, remoteOpts(ctx, r)...)
}

// sweepEnqueue runs `registry gc sweep --enqueue <config>`: the slow path
// that finds unreferenced blobs the queue does not know about.
func sweepEnqueue(t *testing.T, configPath string) string {
	t.Helper()
	out, err := exec.Command(registrytest.Binary(t), "gc", "sweep", "--enqueue", configPath).CombinedOutput()
	if err != nil {
		t.Fatalf("registry gc sweep --enqueue: %v\n%s", err, out)
	}
	return strings.TrimSpace(string(out))
}

// writeSweepConfig writes a config for the CLI on the soak's storage and Redis.
func writeSweepConfig(t *testing.T, c *cluster) string {
	t.Helper()
	cfg := fmt.Sprintf(`version: 0.1
storage:
  filesystem:
    rootdirectory: %s
middleware:
  storage:
    - name: reclaim
      options:
        window: %s
        dedup: 50ms
        prefix: %q
        redis:
          addrs: [%s]
        gc:
          enabled: true
`, c.root, window, c.prefix, c.redisAddr)
	p := filepath.Join(t.TempDir(), "sweep.yml")
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// diagnose describes, from the storage itself, what is left of repo's
// manifest top and of the missing object: for the report of a loss.
func (c *cluster) diagnose(repo string, top v1.Hash, err error) string {
	ctx := context.Background()
	exists := func(p string) string {
		if _, err := c.raw.Stat(ctx, p); err != nil {
			return "missing"
		}
		return "present"
	}
	var b strings.Builder
	if top.Hex != "" {
		td := digest.Digest(top.String())
		fmt.Fprintf(&b, "top %s: revision link %s, data %s; ", top, exists(layout.RevisionLinkPath(repo, td)), exists(layout.BlobDataPath(td)))
	}
	var ve *verifyError
	if errors.As(err, &ve) && ve.missing.Hex != "" {
		md := digest.Digest(ve.missing.String())
		fmt.Fprintf(&b, "missing %s: revision link %s, layer link %s, data %s, reverse links %s",
			ve.missing, exists(layout.RevisionLinkPath(repo, md)), exists(layout.LayerLinkPath(repo, md)),
			exists(layout.BlobDataPath(md)), exists(layout.ReverseLinksDir(md)))
	}
	return b.String()
}
