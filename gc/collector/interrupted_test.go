package collector

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/reclaim-registry/reclaim/gc/internal/gctest"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/reclaim/gcrun"
)

// recordingTracker adds the tracker's run records to the lease fixture's
// tracker, as the registry wires them.
type recordingTracker struct{ *redisTracker }

func (r recordingTracker) BeginRun(ctx context.Context, repo, id string, started time.Time, lease time.Duration) (gcrun.Handle, error) {
	l, err := r.Tracker.BeginRun(ctx, repo, id, started, lease)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// A run dies in the middle of a delete (its delete held in the storage, its
// lock then gone as a killed process's expires). Another instance reads it
// interrupted, with the step, the object and deletions started; the next run
// on the repository re-checks what it may have half done, queues the orphan
// for review and says so in its report.
func TestInterruptedRunIsReconciled(t *testing.T) {
	for _, tc := range []struct {
		target   deleteTarget
		step     gcrun.Step
		findings []string // per rechecked object, in order
		orphan   bool
	}{
		{layerTarget, gcrun.StepLayerLinks, []string{"link present", "still linked by crash"}, false},
		{blobTarget, gcrun.StepBlobs, []string{"orphaned"}, true},
	} {
		t.Run(tc.target.name, func(t *testing.T) {
			f := newLeaseFixture(t, func(c *Config) { r := recordingTracker{c.Tracker.(*redisTracker)}; c.Tracker, c.Runs = r, r })
			f.c.cfg.Review = f.env.Queue()
			const repo = "crash"
			d := f.layer(repo, "stray "+tc.target.name)
			// A layer pulled just now keeps the repository alive.
			keep := f.layer(repo, "kept")
			if err := f.env.Tracker.Touch(context.Background(), reclaim.Object{Blob: keep}, reclaim.Object{Blob: keep, Repo: repo, Kind: reclaim.LinkLayer}); err != nil {
				t.Fatal(err)
			}
			reached, release := f.hold(tc.target.dir(repo, d))
			done := f.start(repo)
			gctest.Wait(t, reached, "the delete")

			other := f.second(t)
			id := f.runningID(t)
			if rep, ok, err := other.LookupRun(context.Background(), id); err != nil || !ok || rep.Status != gcrun.StatusRunning || rep.Step != tc.step {
				t.Fatalf("live run read from another instance: %+v %v %v", rep, ok, err)
			}
			// The process dies: its lock expires unrenewed.
			if err := f.env.Tracker.Client().Del(context.Background(), "reclaim:run:"+repo).Err(); err != nil {
				t.Fatal(err)
			}
			rep, ok, err := other.LookupRun(context.Background(), id)
			if err != nil || !ok || rep.Status != gcrun.StatusInterrupted || rep.Interruption == nil {
				t.Fatalf("dead run: %+v %v %v", rep, ok, err)
			}
			in := rep.Interruption
			if in.Step != tc.step || in.LastObject == nil || *in.LastObject != (ObjectRef{tc.target.kind, d}) ||
				in.DeletionsStarted == nil || !*in.DeletionsStarted {
				t.Fatalf("interruption: %+v last %+v", in, in.LastObject)
			}

			next, err := other.Collect(context.Background(), repo, RunOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(next.Reconciled) != 1 || next.Reconciled[0].RunID != id {
				t.Fatalf("next run reconciled %+v", next.Reconciled)
			}
			rec := next.Reconciled[0]
			if len(rec.Rechecked) != len(tc.findings) {
				t.Fatalf("rechecked %+v, want %d objects", rec.Rechecked, len(tc.findings))
			}
			for i, want := range tc.findings {
				if !strings.HasPrefix(rec.Rechecked[i].Finding, want) {
					t.Errorf("recheck %d: %+v, want %q", i, rec.Rechecked[i], want)
				}
			}
			queued, err := f.env.Queue().Contains(context.Background(), d)
			if err != nil {
				t.Fatal(err)
			}
			if tc.orphan != (len(rec.OrphansQueued) == 1 && rec.OrphansQueued[0] == d) || tc.orphan && !queued {
				t.Fatalf("orphans queued %v (in the queue: %v), want orphan=%v", rec.OrphansQueued, queued, tc.orphan)
			}
			if rep, _, _ := other.LookupRun(context.Background(), id); rep.Interruption.ReconciledBy != next.RunID {
				t.Fatalf("reconciled by %q, want %s", rep.Interruption.ReconciledBy, next.RunID)
			}
			again, err := other.Collect(context.Background(), repo, RunOptions{})
			if err != nil || len(again.Reconciled) != 0 {
				t.Fatalf("reconciled twice: %+v %v", again.Reconciled, err)
			}
			close(release)
			gctest.Wait(t, done, "the first run")
		})
	}
}

// second is another instance's collector on the fixture's storage and Redis.
func (f *leaseFixture) second(t *testing.T) *Collector {
	t.Helper()
	cfg := f.c.cfg
	cfg.Now = nil
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// runningID is the id of the one run in progress on the fixture's collector.
func (f *leaseFixture) runningID(t *testing.T) string {
	t.Helper()
	f.c.mu.Lock()
	defer f.c.mu.Unlock()
	var ids []string
	for id, r := range f.c.runs {
		if r.report.Status == gcrun.StatusRunning {
			ids = append(ids, id)
		}
	}
	if len(ids) != 1 {
		t.Fatalf("runs in progress: %v", ids)
	}
	return ids[0]
}

// An interrupted run that cannot say whether it had started deleting says
// null, not false; one that deleted nothing has a null last object.
func TestInterruptionUnknownIsNull(t *testing.T) {
	rep, err := reportOf(gcrun.State{ID: "x", Repo: "r", Status: gcrun.StatusInterrupted, Step: gcrun.StepSnapshot})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"status":"interrupted"`, `"deletions_started":null`, `"last_object":null`, `"step":"snapshot"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("%s not in %s", want, b)
		}
	}
	no := false
	rep, _ = reportOf(gcrun.State{ID: "x", Repo: "r", Status: gcrun.StatusInterrupted, DeletionsStarted: &no})
	if b, _ := json.Marshal(rep); !strings.Contains(string(b), `"deletions_started":false`) {
		t.Errorf("known no: %s", b)
	}
}
