package linkdb

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/linkdb/internal/gen"
)

func generate(t testing.TB, d storagedriver.StorageDriver, s gen.Spec) gen.Stats {
	t.Helper()
	st, err := gen.Generate(context.Background(), d, s)
	if err != nil {
		t.Fatalf("generate: %v", err)
	}
	return st
}

var small = gen.Spec{Repos: 20, Images: 3, LayersPerImage: 3, SharedLayers: 1, ReferrerEvery: 2}

func TestRebuildInterruptedThenResumed(t *testing.T) {
	for _, where := range []string{"storage", "file"} {
		t.Run(where, func(t *testing.T) {
			d := inmemory.New()
			st := generate(t, d, small)
			cp := StorageCheckpoint(d)
			if where == "file" {
				cp = FileCheckpoint(filepath.Join(t.TempDir(), "checkpoint.json"))
			}
			const k = 7
			ctx, cancel := context.WithCancel(context.Background())
			var done atomic.Int32
			first, err := Rebuild(ctx, d, RebuildOptions{Workers: 2, Checkpoint: cp, repoDone: func(string) {
				if done.Add(1) == k {
					cancel()
				}
			}})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("interrupted rebuild: err %v, want context.Canceled", err)
			}
			if first.Complete {
				t.Fatal("interrupted rebuild wrote the marker")
			}
			if _, ok, _ := LinkDBComplete(context.Background(), d); ok {
				t.Fatal("marker after an interrupted rebuild")
			}
			saved, err := cp.Load(context.Background())
			if err != nil || saved == nil || len(saved.Repositories) < k {
				t.Fatalf("checkpoint after interrupt: %+v, %v", saved, err)
			}

			var redone []string
			var mu sync.Mutex
			second, err := Rebuild(context.Background(), d, RebuildOptions{Workers: 2, Checkpoint: cp, repoDone: func(r string) {
				mu.Lock()
				redone = append(redone, r)
				mu.Unlock()
			}})
			if err != nil {
				t.Fatalf("resumed rebuild: %v", err)
			}
			if !second.Resumed || !second.Started.Equal(first.Started) {
				t.Errorf("resumed: %v, started %v, want the first run's %v", second.Resumed, second.Started, first.Started)
			}
			if second.RepositoriesSkipped != len(saved.Repositories) || len(redone) != small.Repos-len(saved.Repositories) {
				t.Errorf("skipped %d (checkpoint had %d), redone %d", second.RepositoriesSkipped, len(saved.Repositories), len(redone))
			}
			for _, r := range redone {
				for _, s := range saved.Repositories {
					if r == s {
						t.Errorf("%s was finished by the first run and walked again", r)
					}
				}
			}
			since, ok, err := LinkDBComplete(context.Background(), d)
			if err != nil || !ok || !since.Equal(first.Started) {
				t.Errorf("marker %v %v %v, want complete since the first start %v", since, ok, err, first.Started)
			}
			if c, _ := cp.Load(context.Background()); c != nil {
				t.Errorf("checkpoint left after success: %+v", c)
			}
			rep := verify(t, d)
			if rep.ExitCode != ExitClean || rep.ForwardLinks != st.Links() || rep.ReverseLinks != st.Links() {
				t.Errorf("verify after resume: exit %d, %+v, forward %d reverse %d, generated %d",
					rep.ExitCode, rep.Counts, rep.ForwardLinks, rep.ReverseLinks, st.Links())
			}
		})
	}
}

func TestRebuildBadCheckpoint(t *testing.T) {
	d := inmemory.New()
	generate(t, d, small)
	ctx := context.Background()
	if err := d.PutContent(ctx, checkpointPath, []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	if _, err := Rebuild(ctx, d, RebuildOptions{Checkpoint: StorageCheckpoint(d)}); !errors.Is(err, ErrBadCheckpoint) {
		t.Fatalf("err %v, want ErrBadCheckpoint", err)
	}
	if _, err := Rebuild(ctx, d, RebuildOptions{Checkpoint: StorageCheckpoint(d), Restart: true}); err != nil {
		t.Fatalf("--restart: %v", err)
	}
}

// fakeTracker is the access tracker's protocol, in memory: Touch (registry
// side) fails while a link is fenced; FenceLink (rebuild/GC side) fails when
// the link was touched within the window or is fenced. Both are atomic. Its
// clock is logical: every Touch and FenceLink moves it on a millisecond, so
// a window is a number of operations, and Advance passes one at once.
type fakeTracker struct {
	mu       sync.Mutex
	window   time.Duration
	now      time.Time
	touched  map[reclaim.Object]time.Time
	fenced   map[reclaim.Object]bool
	released chan struct{} // closed, and replaced, when a fence is released
	refused  atomic.Int64
	// onRefuse, if set, is told each Touch the fence refuses.
	onRefuse func()
}

func newTracker(window time.Duration) *fakeTracker {
	return &fakeTracker{window: window, now: time.Unix(0, 0), touched: map[reclaim.Object]time.Time{},
		fenced: map[reclaim.Object]bool{}, released: make(chan struct{})}
}

var errFenced = errors.New("fenced")

// Advance moves the clock on by d.
func (t *fakeTracker) Advance(d time.Duration) {
	t.mu.Lock()
	t.now = t.now.Add(d)
	t.mu.Unlock()
}

// Touch records an access of link, unless it is fenced. wait is closed once
// a fence is released, for a refused caller to try again.
func (t *fakeTracker) Touch(link reclaim.Object) (wait <-chan struct{}, err error) {
	t.mu.Lock()
	t.now = t.now.Add(time.Millisecond)
	if t.fenced[link] {
		wait = t.released
		t.mu.Unlock()
		t.refused.Add(1)
		if t.onRefuse != nil {
			t.onRefuse()
		}
		return wait, errFenced
	}
	t.touched[link] = t.now
	t.mu.Unlock()
	return nil, nil
}

func (t *fakeTracker) FenceLink(_ context.Context, link reclaim.Object) (func(), error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.now = t.now.Add(time.Millisecond)
	if t.fenced[link] {
		return nil, errFenced
	}
	if at, ok := t.touched[link]; ok && t.now.Sub(at) < t.window {
		return nil, errors.New("recently accessed")
	}
	t.fenced[link] = true
	return func() {
		t.mu.Lock()
		delete(t.fenced, link)
		close(t.released)
		t.released = make(chan struct{})
		t.mu.Unlock()
	}, nil
}

func layerLink(repo string, blob digest.Digest) reclaim.Object {
	return reclaim.Object{Blob: blob, Repo: repo, Kind: reclaim.LinkLayer}
}

// link is the middleware's order for a forward link write: touch + fence
// check, reverse link, forward link. A fenced link is tried again once the
// fence is released, as a client retries the registry's retryable error.
func link(ctx context.Context, d storagedriver.StorageDriver, tr *fakeTracker, repo string, blob digest.Digest) error {
	for {
		wait, err := tr.Touch(layerLink(repo, blob))
		if err == nil {
			break
		}
		<-wait
	}
	rev := layout.ReverseLinkPath(blob, repo, reclaim.LinkLayer)
	if err := d.PutContent(ctx, rev, []byte(blob)); err != nil {
		return err
	}
	if err := d.PutContent(ctx, layout.LayerLinkPath(repo, blob), []byte(blob)); err != nil {
		return err
	}
	// The writer's look of case 9 (the middleware's reverseAfter): a writer
	// that stalled for longer than the window between its touch and its
	// forward write (here: while the other writers' touches moved the fake
	// clock on) may have lost its reverse link to a rebuild's stale removal.
	if _, err := d.Stat(ctx, rev); layout.IsNotFound(err) {
		return d.PutContent(ctx, rev, []byte(blob))
	} else if err != nil {
		return err
	}
	return nil
}

// unlink is the middleware's order for a delete: forward, then reverse.
func unlink(ctx context.Context, d storagedriver.StorageDriver, repo string, blob digest.Digest) error {
	if err := d.Delete(ctx, layout.LayerLinkPath(repo, blob)); err != nil && !layout.IsNotFound(err) {
		return err
	}
	return nil // the middleware removes the reverse link after; leaving it is the leak case
}

func TestRebuildWhileLinksChange(t *testing.T) {
	d := inmemory.New()
	// Small: the writers spin for as long as the rebuilds run, and a few
	// repositories give them collisions with the rebuild's fences.
	churn := gen.Spec{Repos: 8, Images: 2, LayersPerImage: 2, SharedLayers: 1, ReferrerEvery: 2}
	generate(t, d, churn)
	ctx := context.Background()
	tr := newTracker(50 * time.Millisecond) // 50 operations

	// Blobs the writers link and unlink in the middle of the rebuild, in
	// repositories that also hold generated links.
	var blobs []digest.Digest
	for i := range 20 {
		b := digest.FromString(fmt.Sprintf("churn %d", i))
		if err := d.PutContent(ctx, layout.BlobDataPath(b), []byte("x")); err != nil {
			t.Fatal(err)
		}
		blobs = append(blobs, b)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for {
				select {
				case <-stop:
					return
				default:
				}
				repo, b := gen.RepoName(rng.IntN(churn.Repos)), blobs[rng.IntN(len(blobs))]
				var err error
				if rng.IntN(2) == 0 {
					err = link(ctx, d, tr, repo, b)
				} else {
					err = unlink(ctx, d, repo, b)
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	for range 3 {
		if _, err := Rebuild(ctx, d, RebuildOptions{Workers: 3, Fencer: tr, MinAge: -1}); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	rep := verify(t, d)
	if n := rep.Counts[MissingReverse]; n != 0 {
		t.Fatalf("%d forward links without reverse link after rebuilds raced link writes: %+v", n, rep.Findings)
	}
	// Once the writers stop and the window passes, a rebuild removes every leak.
	tr.Advance(2 * tr.window)
	if _, err := Rebuild(ctx, d, RebuildOptions{Workers: 3, Fencer: tr, MinAge: -1}); err != nil {
		t.Fatal(err)
	}
	if rep := verify(t, d); rep.ExitCode != ExitClean {
		t.Fatalf("after a quiet rebuild: exit %d %+v", rep.ExitCode, rep.Counts)
	}
}

// The race the fence closes, made deterministic: a push re-links the blob
// right after rebuild's re-check found the forward link absent and before
// its delete.
func TestRebuildStaleRemovalRacesRelink(t *testing.T) {
	ctx := context.Background()
	blob := digest.FromString("relinked")
	const repo = "app"
	setup := func(t *testing.T) storagedriver.StorageDriver {
		d := inmemory.New()
		if err := d.PutContent(ctx, layout.BlobDataPath(blob), []byte("x")); err != nil {
			t.Fatal(err)
		}
		// stale: reverse link only
		if err := d.PutContent(ctx, layout.ReverseLinkPath(blob, repo, reclaim.LinkLayer), []byte(blob)); err != nil {
			t.Fatal(err)
		}
		return d
	}

	t.Run("fenced", func(t *testing.T) {
		d := setup(t)
		tr := newTracker(time.Hour)
		pushed := make(chan error, 1)
		refused := make(chan struct{})
		var once sync.Once
		tr.onRefuse = func() { once.Do(func() { close(refused) }) }
		res, err := Rebuild(ctx, d, RebuildOptions{Fencer: tr, MinAge: -1, beforeDel: func() {
			// The push starts now and must wait for the fence.
			go func() { pushed <- link(ctx, d, tr, repo, blob) }()
			<-refused
		}})
		if err != nil {
			t.Fatal(err)
		}
		if err := <-pushed; err != nil {
			t.Fatal(err)
		}
		if tr.refused.Load() == 0 {
			t.Error("the push was never refused by the fence: the test did not exercise the race")
		}
		if res.StaleRemoved != 1 {
			t.Errorf("removed %d, want 1", res.StaleRemoved)
		}
		if rep := verify(t, d); rep.Counts[MissingReverse] != 0 || rep.ExitCode != ExitClean {
			t.Fatalf("exit %d %+v", rep.ExitCode, rep.Counts)
		}
	})

	t.Run("recently accessed", func(t *testing.T) {
		d := setup(t)
		tr := newTracker(time.Hour)
		if _, err := tr.Touch(layerLink(repo, blob)); err != nil {
			t.Fatal(err)
		}
		res, err := Rebuild(ctx, d, RebuildOptions{Fencer: tr, MinAge: -1})
		if err != nil {
			t.Fatal(err)
		}
		if res.StaleRemoved != 0 || res.StaleKept != 1 {
			t.Errorf("removed %d kept %d: a recently accessed link must be kept", res.StaleRemoved, res.StaleKept)
		}
	})

	t.Run("offline restores", func(t *testing.T) {
		// --offline is wrong here: a push lands between re-check and delete.
		// The re-check after the delete puts the reverse link back.
		d := setup(t)
		res, err := Rebuild(ctx, d, RebuildOptions{Offline: true, MinAge: -1, beforeDel: func() {
			if err := d.PutContent(ctx, layout.LayerLinkPath(repo, blob), []byte(blob)); err != nil {
				t.Fatal(err)
			}
		}})
		if err != nil {
			t.Fatal(err)
		}
		if res.StaleRestored != 1 {
			t.Errorf("restored %d, want 1", res.StaleRestored)
		}
		if rep := verify(t, d); rep.ExitCode != ExitClean {
			t.Fatalf("exit %d %+v", rep.ExitCode, rep.Counts)
		}
	})
}

// Interrupted in the blob phase: the repositories phase had finished, so the
// marker is already there; the rerun skips every repository and the finished
// shards.
func TestRebuildInterruptedInBlobPhase(t *testing.T) {
	d := inmemory.New()
	generate(t, d, small)
	ctx := context.Background()
	// stale reverse links spread over the shards, for the blob phase to remove
	for i := range 40 {
		b := digest.FromString(fmt.Sprintf("stale %d", i))
		if err := d.PutContent(ctx, layout.ReverseLinkPath(b, "gone", reclaim.LinkLayer), []byte(b)); err != nil {
			t.Fatal(err)
		}
	}
	cp := StorageCheckpoint(d)
	cctx, cancel := context.WithCancel(ctx)
	var n atomic.Int32
	first, err := Rebuild(cctx, d, RebuildOptions{Workers: 2, Offline: true, MinAge: -1, Checkpoint: cp,
		shardDone: func(string) {
			if n.Add(1) == 10 {
				cancel()
			}
		}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
	if !first.Complete {
		t.Error("the repositories phase finished but no marker was written")
	}
	saved, err := cp.Load(ctx)
	if err != nil || saved == nil || len(saved.Repositories) != small.Repos || len(saved.Shards) < 10 {
		t.Fatalf("checkpoint %+v %v", saved, err)
	}
	second, err := Rebuild(ctx, d, RebuildOptions{Workers: 2, Offline: true, MinAge: -1, Checkpoint: cp})
	if err != nil {
		t.Fatal(err)
	}
	if second.RepositoriesSkipped != small.Repos || second.ShardsSkipped != len(saved.Shards) || second.ForwardLinks != 0 {
		t.Errorf("second run: %+v", second)
	}
	if first.StaleRemoved+second.StaleRemoved != 40 {
		t.Errorf("stale removed %d + %d, want 40", first.StaleRemoved, second.StaleRemoved)
	}
	if rep := verify(t, d); rep.ExitCode != ExitClean {
		t.Fatalf("exit %d %+v", rep.ExitCode, rep.Counts)
	}
}

func verify(t *testing.T, d storagedriver.StorageDriver) *Report {
	t.Helper()
	rep, err := Verify(context.Background(), d, VerifyOptions{Workers: 3})
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	return rep
}
