package collector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
	"github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/reclaim-registry/reclaim/gc"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// fakeTracker is an in-memory Tracker with a settable clock.
type fakeTracker struct {
	mu       sync.Mutex
	now      time.Time
	since    time.Time
	sinceErr error
	access   map[reclaim.Object]time.Time
	fences   map[reclaim.Object]bool
	locks    map[string]bool
	onFence  func(o reclaim.Object)      // runs before the fence is decided: a racing client
	expire   func(o reclaim.Object) bool // true: o's fence has expired by the time of its delete
	onUnlock func(repo string)           // runs after a repository lock was given back
	fenceErr error
}

func newFakeTracker() *fakeTracker {
	return &fakeTracker{now: t0.Add(48 * time.Hour), since: t0, access: map[reclaim.Object]time.Time{},
		fences: map[reclaim.Object]bool{}, locks: map[string]bool{}}
}

func (f *fakeTracker) clock() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.now }

func (f *fakeTracker) touch(o reclaim.Object) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.access[o] = f.now
}

func (f *fakeTracker) RecordingSince(ctx context.Context) (time.Time, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.since, f.sinceErr
}

func (f *fakeTracker) LastAccess(ctx context.Context, o reclaim.Object) (time.Time, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if errors.Is(f.sinceErr, reclaim.ErrTrackerUnavailable) {
		// the real tracker reads records whatever its epoch says, but not
		// from a Redis that does not answer
		return time.Time{}, false, f.sinceErr
	}
	t, ok := f.access[o]
	return t, ok, nil
}

func (f *fakeTracker) Fence(ctx context.Context, o reclaim.Object, window, lease time.Duration) (Hold, error) {
	if f.onFence != nil {
		f.onFence(o)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fenceErr != nil {
		return nil, f.fenceErr
	}
	if f.fences[o] {
		return nil, reclaim.ErrFenced
	}
	if t, ok := f.access[o]; ok && t.After(f.now.Add(-window)) {
		return nil, reclaim.ErrRecentlyAccessed
	}
	f.fences[o] = true
	return fakeHold{f: f, o: o}, nil
}

// fakeHold is a fence of the fake tracker. A test expires it by deleting
// the object from f.fences (or by setting f.expire).
type fakeHold struct {
	f *fakeTracker
	o reclaim.Object
}

func (h fakeHold) Confirm(context.Context) error {
	h.f.mu.Lock()
	defer h.f.mu.Unlock()
	if h.f.expire != nil && h.f.expire(h.o) {
		delete(h.f.fences, h.o)
	}
	if !h.f.fences[h.o] {
		return reclaim.ErrFenceLost
	}
	return nil
}

func (h fakeHold) Release(context.Context) error {
	h.f.mu.Lock()
	defer h.f.mu.Unlock()
	delete(h.f.fences, h.o)
	return nil
}

func (f *fakeTracker) LockRepository(ctx context.Context, repo string, lease time.Duration) (context.Context, func(), error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.locks[repo] {
		return nil, nil, reclaim.ErrRepositoryBusy
	}
	f.locks[repo] = true
	held, cancel := context.WithCancel(ctx)
	onUnlock := f.onUnlock
	return held, func() {
		cancel()
		f.mu.Lock()
		delete(f.locks, repo)
		f.mu.Unlock()
		if onUnlock != nil {
			onUnlock(repo)
		}
	}, nil
}

// scanLinks is a LinkIndex computed from the forward links, the way the
// middleware keeps it: correct by construction, O(registry), test only.
type scanLinks struct{ d storagedriver.StorageDriver }

func (s scanLinks) List(ctx context.Context, blob digest.Digest) ([]reclaim.RepoLink, error) {
	var out []reclaim.RepoLink
	suffixL := "/_layers/" + blob.Algorithm().String() + "/" + blob.Encoded() + "/link"
	suffixM := "/_manifests/revisions/" + blob.Algorithm().String() + "/" + blob.Encoded() + "/link"
	err := s.d.Walk(ctx, layout.RepositoriesRoot, func(fi storagedriver.FileInfo) error {
		p := fi.Path()
		for suffix, k := range map[string]reclaim.LinkKind{suffixL: reclaim.LinkLayer, suffixM: reclaim.LinkManifest} {
			if strings.HasSuffix(p, suffix) {
				repo := strings.TrimSuffix(strings.TrimPrefix(p, layout.RepositoriesRoot+"/"), suffix)
				out = append(out, reclaim.RepoLink{Repo: repo, Kind: k})
			}
		}
		return nil
	})
	if layout.IsNotFound(err) {
		err = nil
	}
	return out, err
}

// ListFor is List: the scan has no cheaper walk.
func (s scanLinks) ListFor(ctx context.Context, blob digest.Digest, _ string) ([]reclaim.RepoLink, error) {
	return s.List(ctx, blob)
}

// fixture writes Distribution's layout directly.
type fixture struct {
	t  testing.TB
	d  storagedriver.StorageDriver
	tr *fakeTracker
	c  *Collector
}

func newFixture(t *testing.T, mod ...func(*Config)) *fixture {
	t.Helper()
	f := &fixture{t: t, d: inmemory.New(), tr: newFakeTracker()}
	cfg := Config{Driver: f.d, Tracker: f.tr, Links: scanLinks{f.d},
		LinkDBComplete: func(context.Context) (bool, error) { return true, nil },
		Window:         time.Hour, Now: f.tr.clock}
	for _, m := range mod {
		m(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.c = c
	return f
}

func (f *fixture) put(p string, b []byte) {
	f.t.Helper()
	if err := f.d.PutContent(context.Background(), p, b); err != nil {
		f.t.Fatal(err)
	}
}

// blob stores content and returns its descriptor.
func (f *fixture) blob(content string) v1.Descriptor {
	d := digest.FromString(content)
	f.put(layout.BlobDataPath(d), []byte(content))
	return v1.Descriptor{MediaType: v1.MediaTypeImageLayerGzip, Digest: d, Size: int64(len(content))}
}

// layer stores a blob and links it into repo.
func (f *fixture) layer(repo, content string) v1.Descriptor {
	desc := f.blob(content)
	f.put(layout.LayerLinkDir(repo, desc.Digest)+"/link", []byte(desc.Digest))
	return desc
}

func (f *fixture) rawManifest(repo string, b []byte) digest.Digest {
	d := digest.FromBytes(b)
	f.put(layout.BlobDataPath(d), b)
	f.put(layout.RevisionDir(repo, d)+"/link", []byte(d))
	return d
}

// image pushes config + layers as an OCI manifest; subject optional.
func (f *fixture) image(repo string, subject *v1.Descriptor, layers ...string) v1.Descriptor {
	cfg := f.layer(repo, "config of "+strings.Join(layers, ","))
	cfg.MediaType = v1.MediaTypeImageConfig
	m := v1.Manifest{MediaType: v1.MediaTypeImageManifest, Config: cfg, Subject: subject}
	m.SchemaVersion = 2
	for _, l := range layers {
		m.Layers = append(m.Layers, f.layer(repo, l))
	}
	b, _ := json.Marshal(m)
	d := f.rawManifest(repo, b)
	return v1.Descriptor{MediaType: v1.MediaTypeImageManifest, Digest: d, Size: int64(len(b))}
}

func (f *fixture) index(repo string, children ...v1.Descriptor) v1.Descriptor {
	ix := v1.Index{MediaType: v1.MediaTypeImageIndex, Manifests: children}
	ix.SchemaVersion = 2
	b, _ := json.Marshal(ix)
	d := f.rawManifest(repo, b)
	return v1.Descriptor{MediaType: v1.MediaTypeImageIndex, Digest: d, Size: int64(len(b))}
}

func (f *fixture) tag(repo, tag string, d digest.Digest) {
	f.put(layout.TagCurrentPath(repo, tag), []byte(d))
	f.put(path.Dir(layout.TagIndexPath(repo, tag, d))+"/link", []byte(d))
}

func (f *fixture) untag(repo, tag string) {
	if err := f.d.Delete(context.Background(), layout.TagsDir(repo)+"/"+tag); err != nil {
		f.t.Fatal(err)
	}
}

// tree lists every file in storage with its content, to prove a dry run
// changed nothing.
func (f *fixture) tree() string {
	var lines []string
	err := f.d.Walk(context.Background(), "/", func(fi storagedriver.FileInfo) error {
		if !fi.IsDir() {
			b, err := f.d.GetContent(context.Background(), fi.Path())
			if err != nil {
				return err
			}
			lines = append(lines, fmt.Sprintf("%s %x", fi.Path(), digest.FromBytes(b).Encoded()[:8]))
		}
		return nil
	})
	if err != nil && !layout.IsNotFound(err) {
		f.t.Fatal(err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func (f *fixture) exists(p string) bool {
	_, err := f.d.Stat(context.Background(), p)
	if err != nil && !layout.IsNotFound(err) {
		f.t.Fatal(err)
	}
	return err == nil
}

// collect runs a dry run, checks it changed nothing, then a real run, and
// checks the real run deleted exactly what the dry run announced.
func (f *fixture) collect(repo string, o RunOptions) *Report {
	f.t.Helper()
	ctx := context.Background()
	before := f.tree()
	o.DryRun = true
	dry, err := f.c.Collect(ctx, repo, o)
	if err != nil {
		f.t.Fatalf("dry run: %v", err)
	}
	if after := f.tree(); after != before {
		f.t.Fatalf("dry run changed storage:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	o.DryRun = false
	rep, err := f.c.Collect(ctx, repo, o)
	if err != nil {
		f.t.Fatalf("collect: %v", err)
	}
	if !sameDigests(dry.ManifestsDeleted, rep.ManifestsDeleted) || !sameDigests(dry.LayersUnlinked, rep.LayersUnlinked) ||
		!sameDigests(dry.BlobsDeleted, rep.BlobsDeleted) || dry.BytesFreed != rep.BytesFreed {
		f.t.Fatalf("dry run and real run differ:\ndry:  %+v\nreal: %+v", summary(dry), summary(rep))
	}
	checkOneDecisionEach(f.t, rep)
	checkOneDecisionEach(f.t, dry)
	return rep
}

func summary(r *Report) string {
	return fmt.Sprintf("manifests=%v layers=%v blobs=%v bytes=%d kept=%v", r.ManifestsDeleted, r.LayersUnlinked, r.BlobsDeleted, r.BytesFreed, r.Kept)
}

func sameDigests(a, b []digest.Digest) bool {
	x := append([]digest.Digest(nil), a...)
	y := append([]digest.Digest(nil), b...)
	sort.Slice(x, func(i, j int) bool { return x[i] < x[j] })
	sort.Slice(y, func(i, j int) bool { return y[i] < y[j] })
	return fmt.Sprint(x) == fmt.Sprint(y)
}

func checkOneDecisionEach(t testing.TB, r *Report) {
	t.Helper()
	seen := map[key]bool{}
	for _, d := range r.Decisions() {
		k := key{d.Kind, d.Digest}
		if seen[k] {
			t.Fatalf("two decisions for %s %s", d.Kind, d.Digest)
		}
		if !d.Reason.Valid() {
			t.Fatalf("invalid reason for %s %s", d.Kind, d.Digest)
		}
		if strings.Contains(d.Detail, gc.ErrNoFact.Error()) {
			t.Fatalf("%s %s: decide read a fact that was not gathered: %s", d.Kind, d.Digest, d.Detail)
		}
		seen[k] = true
	}
}

func reasonOf(r *Report, k reclaim.ObjectKind, d digest.Digest) reclaim.Reason {
	return decisionOf(r, k, d).Reason
}

func decisionOf(r *Report, k reclaim.ObjectKind, d digest.Digest) gc.Decision {
	for _, dec := range r.Decisions() {
		if dec.Kind == k && dec.Digest == d {
			return dec
		}
	}
	return gc.Decision{}
}

func has(ds []digest.Digest, d digest.Digest) bool {
	for _, x := range ds {
		if x == d {
			return true
		}
	}
	return false
}

var errBoom = errors.New("boom")

// failingDelete fails every delete of one path.
type failingDelete struct {
	storagedriver.StorageDriver
	path string
}

func (f failingDelete) Delete(ctx context.Context, p string) error {
	if p == f.path {
		return errBoom
	}
	return f.StorageDriver.Delete(ctx, p)
}
