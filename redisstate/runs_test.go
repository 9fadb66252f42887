package redisstate

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/reclaim/gcrun"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

const runLease = time.Minute

// die leaves l's record as a killed process does: running, and its lock no
// longer held by it (here released; in production it expires unrenewed).
func die(t *testing.T, tr *Tracker, repo string, l gcrun.Handle) {
	t.Helper()
	l.Unlock()
	if n := tr.c.Exists(context.Background(), tr.lockKey(repo)).Val(); n != 0 {
		t.Fatal("the lock outlived Unlock")
	}
}

func load(t *testing.T, tr *Tracker, id, marker string) gcrun.State {
	t.Helper()
	st, ok, err := tr.LoadRun(context.Background(), id, marker)
	if err != nil || !ok {
		t.Fatalf("LoadRun(%s): ok=%v err=%v", id, ok, err)
	}
	return st
}

func deletions(p *bool) string {
	if p == nil {
		return "null"
	}
	return map[bool]string{true: "true", false: "false"}[*p]
}

// A run reads running while it holds its lock, its outcome once it ended,
// and interrupted (step, last object, deletions started) once its lock is
// gone while its record still says running.
func TestRunRecordStates(t *testing.T) {
	storagetest.ForEachBackend(t, func(t *testing.T, b storagetest.Backend) {
		tr := newTestTracker(t, b)
		ctx := context.Background()
		if err := tr.StartRecording(ctx); err != nil {
			t.Fatal(err)
		}
		age(t, tr, window)
		const repo = "a/runs"
		l, err := tr.BeginRun(ctx, repo, "run1", time.Now(), runLease)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tr.BeginRun(ctx, repo, "run2", time.Now(), runLease); !errors.Is(err, reclaim.ErrRepositoryBusy) {
			t.Fatalf("second run on a locked repository: %v, want busy", err)
		}
		if _, ok, _ := tr.LoadRun(ctx, "run2", "x"); ok {
			t.Fatal("a run refused its lock left a record")
		}
		if st := load(t, tr, "run1", "reader"); st.Status != gcrun.StatusRunning || st.Step != "snapshot" || st.MarkedBy != "" {
			t.Fatalf("live run: %+v", st)
		}
		if err := l.Progress(ctx, gcrun.Progress{Step: "manifests", Kind: "manifest", Object: dA.String(), Deleting: true, Unlinks: dA.String()}); err != nil {
			t.Fatal(err)
		}
		if err := l.End(ctx, "done", []byte(`{"status":"done"}`)); err != nil {
			t.Fatal(err)
		}
		l.Unlock()
		if st := load(t, tr, "run1", "reader"); st.Status != "done" || string(st.Report) != `{"status":"done"}` {
			t.Fatalf("ended run: %+v", st)
		}

		// A run that dies after writing a delete ahead.
		l, err = tr.BeginRun(ctx, repo, "run3", time.Now(), runLease)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Progress(ctx, gcrun.Progress{Step: "layer_links", Kind: "layer_link", Object: dB.String(), Deleting: true, Unlinks: dB.String()}); err != nil {
			t.Fatal(err)
		}
		die(t, tr, repo, l)
		st := load(t, tr, "run3", "reader A")
		if st.Status != gcrun.StatusInterrupted || st.Step != "layer_links" || st.LastKind != "layer_link" || st.LastObject != dB.String() ||
			deletions(st.DeletionsStarted) != "true" || st.MarkedBy != "reader A" || st.InterruptedAt.IsZero() || len(st.Unlinked) != 1 {
			t.Fatalf("dead run: %+v (deletions %s)", st, deletions(st.DeletionsStarted))
		}
		if err := l.Progress(ctx, gcrun.Progress{Step: "blobs"}); !errors.Is(err, reclaim.ErrLockLost) {
			t.Fatalf("write ahead on an interrupted record: %v, want ErrLockLost", err)
		}
		if again := load(t, tr, "run3", "reader B"); again.MarkedBy != "reader A" {
			t.Fatalf("marked twice: %+v", again)
		}
		runs, err := tr.RepositoryRuns(ctx, repo, "reader C")
		if err != nil || len(runs) != 2 || runs[0].ID != "run3" || runs[1].ID != "run1" {
			t.Fatalf("RepositoryRuns: %+v, %v", runs, err)
		}
		if ok, err := tr.MarkReconciled(ctx, repo, "run3", "run4"); !ok || err != nil {
			t.Fatalf("MarkReconciled: %v %v", ok, err)
		}
		if ok, _ := tr.MarkReconciled(ctx, repo, "run3", "run5"); ok {
			t.Fatal("reconciled twice")
		}
		if ok, _ := tr.MarkReconciled(ctx, repo, "run1", "run5"); ok {
			t.Fatal("a done run was claimed for reconciliation")
		}
		if st := load(t, tr, "run3", "x"); st.ReconciledBy != "run4" {
			t.Fatalf("reconciled by %q", st.ReconciledBy)
		}
		// A run marked interrupted that was alive after all (it lost its
		// lock) stores its real outcome over the mark.
		if err := l.End(ctx, "failed", []byte(`{"status":"failed"}`)); err != nil {
			t.Fatal(err)
		}
		if st := load(t, tr, "run3", "x"); st.Status != "failed" || string(st.Report) != `{"status":"failed"}` {
			t.Fatalf("outcome after the mark: %+v", st)
		}
	})
}

// Deletions started is "no" only when the run wrote none ahead and Redis
// cannot have lost the write: after the recording epoch moved past the
// run's start (a failover, say) it is unknown.
func TestRunDeletionsUnknown(t *testing.T) {
	storagetest.ForEachBackend(t, func(t *testing.T, b storagetest.Backend) {
		tr := newTestTracker(t, b)
		ctx := context.Background()
		if err := tr.StartRecording(ctx); err != nil {
			t.Fatal(err)
		}
		age(t, tr, window)
		const repo = "a/unknown"
		l, err := tr.BeginRun(ctx, repo, "quiet", time.Now(), runLease)
		if err != nil {
			t.Fatal(err)
		}
		die(t, tr, repo, l)
		if st := load(t, tr, "quiet", "r"); st.Status != gcrun.StatusInterrupted || deletions(st.DeletionsStarted) != "false" || st.Step != "snapshot" {
			t.Fatalf("quiet run: %+v (deletions %s)", st, deletions(st.DeletionsStarted))
		}

		l, err = tr.BeginRun(ctx, repo, "gap", time.Now().Add(-time.Hour), runLease)
		if err != nil {
			t.Fatal(err)
		}
		die(t, tr, repo, l)
		// The epoch is younger than the run: records may have been lost.
		if st := load(t, tr, "gap", "r"); st.Status != gcrun.StatusInterrupted || st.DeletionsStarted != nil {
			t.Fatalf("run across an epoch move: %+v (deletions %s), want null", st, deletions(st.DeletionsStarted))
		}
	})
}

// A live run is not marked, whoever reads it: its lock is held by its token.
// A run whose lock another run took is dead.
func TestRunLockTakenOverIsInterrupted(t *testing.T) {
	storagetest.ForEachBackend(t, func(t *testing.T, b storagetest.Backend) {
		tr := newTestTracker(t, b)
		ctx := context.Background()
		const repo = "a/takeover"
		l, err := tr.BeginRun(ctx, repo, "old", time.Now(), runLease)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Unlock()
		if st := load(t, tr, "old", "r"); st.Status != gcrun.StatusRunning {
			t.Fatalf("live run read %s", st.Status)
		}
		// The lease ran out and another instance's run took the lock.
		if err := tr.c.Set(ctx, tr.lockKey(repo), "someone else", runLease).Err(); err != nil {
			t.Fatal(err)
		}
		if st := load(t, tr, "old", "r"); st.Status != gcrun.StatusInterrupted {
			t.Fatalf("run whose lock another holds read %s", st.Status)
		}
	})
}

// Two readers find the same dead run at once. Both read it running, then
// one marks it; the other's compare-and-swap fails, it reads again and
// returns the winner's state.
func TestRunMarkRace(t *testing.T) {
	storagetest.ForEachBackend(t, func(t *testing.T, b storagetest.Backend) {
		tr := newTestTracker(t, b)
		ctx := context.Background()
		const repo = "a/race"
		l, err := tr.BeginRun(ctx, repo, "dead", time.Now(), runLease)
		if err != nil {
			t.Fatal(err)
		}
		die(t, tr, repo, l)

		read := make(chan string, 4)
		gates := map[string]chan struct{}{"A": make(chan struct{}), "B": make(chan struct{})}
		tr.beforeMark = func(marker string) {
			read <- marker
			<-gates[marker]
		}
		type result struct {
			st  gcrun.State
			err error
		}
		results := map[string]chan result{"A": make(chan result, 1), "B": make(chan result, 1)}
		for m := range results {
			go func() {
				st, _, err := tr.LoadRun(ctx, "dead", m)
				results[m] <- result{st, err}
			}()
		}
		// Both have read the record as running before either swaps.
		seen := map[string]bool{<-read: true, <-read: true}
		if !seen["A"] || !seen["B"] {
			t.Fatalf("readers at the swap: %v", seen)
		}
		close(gates["A"])
		a := <-results["A"]
		close(gates["B"])
		b2 := <-results["B"]
		if a.err != nil || b2.err != nil {
			t.Fatal(a.err, b2.err)
		}
		if len(read) != 0 {
			t.Fatalf("the loser tried to mark again after re-reading: %q", <-read)
		}
		if a.st.Status != gcrun.StatusInterrupted || a.st.MarkedBy != "A" {
			t.Fatalf("winner: %+v", a.st)
		}
		if b2.st.Status != a.st.Status || b2.st.MarkedBy != "A" || !b2.st.InterruptedAt.Equal(a.st.InterruptedAt) ||
			deletions(b2.st.DeletionsStarted) != deletions(a.st.DeletionsStarted) {
			t.Fatalf("loser ended with %+v, winner with %+v", b2.st, a.st)
		}
	})
}

// RecentRuns lists the runs of every repository, newest first, from any
// instance: a run whose process died reads interrupted there too.
func TestRecentRuns(t *testing.T) {
	storagetest.ForEachBackend(t, func(t *testing.T, b storagetest.Backend) {
		tr := newTestTracker(t, b)
		ctx := context.Background()
		t0 := time.Now().Add(-time.Minute)
		var locks []gcrun.Handle
		for i, repo := range []string{"a/one", "b/two", "a/one"} {
			if i == 2 {
				if err := locks[0].End(ctx, "done", []byte(`{}`)); err != nil {
					t.Fatal(err)
				}
				locks[0].Unlock()
			}
			l, err := tr.BeginRun(ctx, repo, fmt.Sprint("run", i), t0.Add(time.Duration(i)*time.Second), runLease)
			if err != nil {
				t.Fatal(err)
			}
			locks = append(locks, l)
		}
		die(t, tr, "b/two", locks[1])
		got, err := tr.RecentRuns(ctx, 10, "test")
		if err != nil {
			t.Fatal(err)
		}
		var seen []string
		for _, st := range got {
			seen = append(seen, st.ID+"="+st.Repo+":"+string(st.Status))
		}
		want := []string{"run2=a/one:running", "run1=b/two:interrupted", "run0=a/one:done"}
		if fmt.Sprint(seen) != fmt.Sprint(want) {
			t.Fatalf("RecentRuns = %v, want %v", seen, want)
		}
		if got[1].MarkedBy != "test" {
			t.Errorf("the dead run was marked by %q, want the reader", got[1].MarkedBy)
		}
		if got, err := tr.RecentRuns(ctx, 1, "test"); err != nil || len(got) != 1 || got[0].ID != "run2" {
			t.Errorf("RecentRuns(1) = %v, %v; want the newest only", got, err)
		}
		locks[2].Unlock()
	})
}
