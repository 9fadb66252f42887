package redisstate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/reclaim/gcrun"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/redis/go-redis/v9"
)

// GC run records. A collection's record lives next to its repository lock,
// in the lock's hash slot, so one script sees both (Redis Cluster: one slot
// per script). With L = <prefix>run:<repo>, the lock key:
//
//	<prefix>{L}:r:<id>   hash: the run (token = the lock token, status, step,
//	                     kind/object written ahead of each delete, deletions
//	                     0/1, version v, report JSON once it ended)
//	<prefix>{L}:u:<id>   set: blobs whose links the run removed (written ahead)
//	<prefix>{L}:runs     sorted set: the repository's recent run ids by start
//	<prefix>runid:<id>   the repository of run <id> (its own slot)
//
// A record whose status is "running" while the lock is no longer held by its
// token belongs to a run whose process died: the first reader marks it
// "interrupted" with a compare-and-swap on v (docs/gc-protocol.md,
// "Interrupted runs").

// runTTL is how long a run record lives after its last write.
const runTTL = 24 * time.Hour

// runsKept is how many run ids a repository's index keeps.
const runsKept = 100

func (t *Tracker) lockKey(repo string) string { return t.opts.Prefix + "run:" + repo }

func (t *Tracker) runBase(repo string) string {
	return t.opts.Prefix + "{" + t.lockKey(repo) + "}"
}

func (t *Tracker) runKey(repo, id string) string      { return t.runBase(repo) + ":r:" + id }
func (t *Tracker) unlinkedKey(repo, id string) string { return t.runBase(repo) + ":u:" + id }
func (t *Tracker) runIndexKey(repo string) string     { return t.runBase(repo) + ":runs" }
func (t *Tracker) runIDKey(id string) string          { return t.opts.Prefix + "runid:" + id }

// recentRunsKey ranks every repository's runs by start (a global key:
// single-key commands only, so it lives on any Cluster slot).
func (t *Tracker) recentRunsKey() string { return t.opts.Prefix + "runs:recent" }

// recentRunsKept is how many run ids the registry-wide index keeps.
const recentRunsKept = 500

// KEYS: lock, record, index. ARGV: token, lease ms, id, started ms, ttl ms, kept.
var beginRunScript = redis.NewScript(`
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end
redis.call('HSET', KEYS[2], 'id', ARGV[3], 'token', ARGV[1], 'status', 'running', 'started', ARGV[4],
  'step', 'snapshot', 'deletions', '0', 'v', '1')
redis.call('PEXPIRE', KEYS[2], ARGV[5])
redis.call('ZADD', KEYS[3], ARGV[4], ARGV[3])
redis.call('ZREMRANGEBYRANK', KEYS[3], 0, -(tonumber(ARGV[6]) + 1))
redis.call('PEXPIRE', KEYS[3], ARGV[5])
return 1
`)

// KEYS: lock, record, index. ARGV: token, id. Undoes beginRunScript for a
// run that could not be made findable by id: nobody was told about it.
var abandonRunScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
if redis.call('HGET', KEYS[2], 'token') == ARGV[1] then redis.call('DEL', KEYS[2]) end
redis.call('ZREM', KEYS[3], ARGV[2])
return 1
`)

// KEYS: record, unlinked. ARGV: token, step, kind, object, deleting, unlinks, ttl ms.
// Only the owner of a running record writes ahead.
var progressScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 0 end
if redis.call('HGET', KEYS[1], 'status') ~= 'running' then return 0 end
redis.call('HSET', KEYS[1], 'step', ARGV[2])
if ARGV[3] ~= '' then redis.call('HSET', KEYS[1], 'kind', ARGV[3], 'object', ARGV[4]) end
if ARGV[5] == '1' then redis.call('HSET', KEYS[1], 'deletions', '1') end
if ARGV[6] ~= '' then
  redis.call('SADD', KEYS[2], ARGV[6])
  redis.call('PEXPIRE', KEYS[2], ARGV[7])
end
redis.call('HINCRBY', KEYS[1], 'v', 1)
return 1
`)

// KEYS: record. ARGV: token, status, report, ttl ms. The owner's outcome
// replaces whatever the record says, an interrupted mark included: a run that
// ends was alive, and its report says what it did.
var endRunScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'status', ARGV[2], 'report', ARGV[3])
redis.call('HINCRBY', KEYS[1], 'v', 1)
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1
`)

// KEYS: lock, record. ARGV: version read, marker, deletions verdict ("1",
// "0" or "" unknown), now ms. Returns 1 marked, 0 the record changed since
// it was read (re-read it), -1 the run holds its lock (alive).
var markScript = redis.NewScript(`
if redis.call('HGET', KEYS[2], 'v') ~= ARGV[1] then return 0 end
if redis.call('HGET', KEYS[2], 'status') ~= 'running' then return 0 end
if redis.call('GET', KEYS[1]) == redis.call('HGET', KEYS[2], 'token') then return -1 end
redis.call('HSET', KEYS[2], 'status', 'interrupted', 'interrupted_at', ARGV[4], 'marked_by', ARGV[2], 'verdict', ARGV[3])
redis.call('HINCRBY', KEYS[2], 'v', 1)
return 1
`)

// KEYS: record. ARGV: reconciler. Claims the reconciliation of an
// interrupted run once.
var reconciledScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'status') ~= 'interrupted' then return 0 end
if redis.call('HSETNX', KEYS[1], 'reconciled_by', ARGV[1]) == 0 then return 0 end
redis.call('HINCRBY', KEYS[1], 'v', 1)
return 1
`)

// runLock is a repository lock that carries a run record: the
// gcrun.Handle BeginRun returns.
type runLock struct {
	t          *Tracker
	repo, id   string
	tok        string
	held       context.Context
	unlockFunc func()
}

// BeginRun takes repo's lock as LockRepository does and, in the same script,
// records run id as running under it. ErrRepositoryBusy when another run
// holds the lock. The lock is a *runLock, seen as the gcrun.Handle
// gc/collector's RunRecorder takes.
func (t *Tracker) BeginRun(ctx context.Context, repo, id string, started time.Time, lease time.Duration) (gcrun.Handle, error) {
	if !layout.ValidRepo(repo) || id == "" || lease < 3*time.Millisecond {
		return nil, fmt.Errorf("redisstate: BeginRun(%q, %q, %v): bad arguments", repo, id, lease)
	}
	tok, err := token()
	if err != nil {
		return nil, err
	}
	keys := []string{t.lockKey(repo), t.runKey(repo, id), t.runIndexKey(repo)}
	n, err := beginRunScript.Run(ctx, t.c, keys, tok, lease.Milliseconds(), id, started.UnixMilli(), runTTL.Milliseconds(), runsKept).Int64()
	if err != nil {
		return nil, fmt.Errorf("%w: lock %s: %v", reclaim.ErrTrackerUnavailable, repo, err)
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: %s", reclaim.ErrRepositoryBusy, repo)
	}
	// Found by id from any instance (GET /gc/v1/runs/<id>), which the
	// caller promises once BeginRun returns: without this key the id would
	// answer "unknown" for ever, so it must be written (a different slot:
	// not in the script). Listed registry-wide too, best effort, so that a
	// run whose process died shows up where people look (the console's
	// recent runs) from any instance.
	var byID *redis.StatusCmd
	_, _ = t.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		byID = p.Set(ctx, t.runIDKey(id), repo, runTTL)
		p.ZAdd(ctx, t.recentRunsKey(), redis.Z{Score: float64(started.UnixMilli()), Member: id})
		p.ZRemRangeByRank(ctx, t.recentRunsKey(), 0, -(recentRunsKept + 1))
		p.PExpire(ctx, t.recentRunsKey(), runTTL)
		return nil
	})
	if err := byID.Err(); err != nil {
		// Give the lock back and leave no record. If Redis cannot take
		// that either, the lock runs out within the lease (it is never
		// renewed) and the record reads interrupted, having deleted nothing.
		_ = abandonRunScript.Run(context.WithoutCancel(ctx), t.c, keys, tok, id).Err()
		return nil, fmt.Errorf("%w: record run %s: %v", reclaim.ErrTrackerUnavailable, id, err)
	}
	held, unlock := t.holdLock(ctx, repo, keys[0], tok, lease)
	return &runLock{t: t, repo: repo, id: id, tok: tok, held: held, unlockFunc: unlock}, nil
}

// Held is cancelled as soon as the lock is known lost (LockRepository).
func (l *runLock) Held() context.Context { return l.held }

// Unlock releases the lock. End the run first: a running record whose lock
// is free reads as interrupted.
func (l *runLock) Unlock() { l.unlockFunc() }

// Progress writes p ahead of the work it announces. An error means it was
// not recorded: the caller must not do that work.
func (l *runLock) Progress(ctx context.Context, p gcrun.Progress) error {
	deleting := ""
	if p.Deleting {
		deleting = "1"
	}
	keys := []string{l.t.runKey(l.repo, l.id), l.t.unlinkedKey(l.repo, l.id)}
	n, err := progressScript.Run(ctx, l.t.c, keys, l.tok, string(p.Step), string(p.Kind), p.Object, deleting, p.Unlinks, runTTL.Milliseconds()).Int64()
	switch {
	case err != nil:
		return fmt.Errorf("%w: record run progress: %v", reclaim.ErrTrackerUnavailable, err)
	case n == 0:
		return fmt.Errorf("%w: run %s: its record is gone or was marked interrupted", reclaim.ErrLockLost, l.id)
	}
	return nil
}

// End stores the run's outcome and report.
func (l *runLock) End(ctx context.Context, status gcrun.Status, report []byte) error {
	// go-redis marshals only plain strings: the record holds the status's string
	n, err := endRunScript.Run(ctx, l.t.c, []string{l.t.runKey(l.repo, l.id)}, l.tok, string(status), report, runTTL.Milliseconds()).Int64()
	switch {
	case err != nil:
		return fmt.Errorf("%w: record run outcome: %v", reclaim.ErrTrackerUnavailable, err)
	case n == 0:
		return fmt.Errorf("run %s: its record is gone (expired or lost)", l.id)
	}
	return nil
}

// LoadRun reads run id, marking it interrupted first when its process died.
// ok is false for an unknown (or expired) id.
func (t *Tracker) LoadRun(ctx context.Context, id, marker string) (gcrun.State, bool, error) {
	repo, err := t.c.Get(ctx, t.runIDKey(id)).Result()
	if errors.Is(err, redis.Nil) {
		return gcrun.State{}, false, nil
	}
	if err != nil {
		return gcrun.State{}, false, fmt.Errorf("%w: read run %s: %v", reclaim.ErrTrackerUnavailable, id, err)
	}
	return t.loadRun(ctx, repo, id, marker, true)
}

// RepositoryRuns reads repo's recent runs, newest first, without their
// reports, marking the ones whose process died interrupted.
func (t *Tracker) RepositoryRuns(ctx context.Context, repo, marker string) ([]gcrun.State, error) {
	ids, err := t.c.ZRevRange(ctx, t.runIndexKey(repo), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("%w: list runs of %s: %v", reclaim.ErrTrackerUnavailable, repo, err)
	}
	var out []gcrun.State
	for _, id := range ids {
		st, ok, err := t.loadRun(ctx, repo, id, marker, false)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, st)
		}
	}
	return out, nil
}

// RecentRuns reads up to n of the registry's most recent runs, newest
// first, with their reports, marking the ones whose process died
// interrupted as LoadRun does. Expired ones are left out. Three pipelined
// round trips (ids, repositories, records), plus LoadRun's for each record
// that still says running.
func (t *Tracker) RecentRuns(ctx context.Context, n int, marker string) ([]gcrun.State, error) {
	if n <= 0 {
		return nil, nil
	}
	ids, err := t.c.ZRevRange(ctx, t.recentRunsKey(), 0, int64(n-1)).Result()
	if err != nil {
		return nil, fmt.Errorf("%w: list recent runs: %v", reclaim.ErrTrackerUnavailable, err)
	}
	repos := make([]*redis.StringCmd, len(ids))
	if _, err := t.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			repos[i] = p.Get(ctx, t.runIDKey(id))
		}
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("%w: read recent runs: %v", reclaim.ErrTrackerUnavailable, err)
	}
	for _, c := range repos { // the pipeline's error is only its first one
		if err := c.Err(); err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("%w: read recent runs: %v", reclaim.ErrTrackerUnavailable, err)
		}
	}
	fields := append(slices.Clip(recordFields), "report")
	records := make([]*redis.SliceCmd, len(ids))
	if _, err := t.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			if repo := repos[i].Val(); repo != "" {
				records[i] = p.HMGet(ctx, t.runKey(repo, id), fields...)
			}
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("%w: read recent runs: %v", reclaim.ErrTrackerUnavailable, err)
	}
	out := make([]gcrun.State, 0, len(ids))
	for i, id := range ids {
		if records[i] == nil {
			continue // expired
		}
		h := make(map[string]string, len(fields))
		for j, v := range records[i].Val() {
			if s, ok := v.(string); ok {
				h[fields[j]] = s
			}
		}
		var st gcrun.State
		ok := h["id"] != ""
		switch {
		case !ok:
			continue
		case gcrun.Status(h["status"]) == gcrun.StatusRunning:
			st, ok, err = t.loadRun(ctx, repos[i].Val(), id, marker, true) // alive, or dead: mark it
		default:
			st, err = t.runState(ctx, repos[i].Val(), h)
		}
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, st)
		}
	}
	return out, nil
}

// MarkReconciled claims the reconciliation of interrupted run id for run by;
// false when it is not interrupted or another run claimed it.
func (t *Tracker) MarkReconciled(ctx context.Context, repo, id, by string) (bool, error) {
	n, err := reconciledScript.Run(ctx, t.c, []string{t.runKey(repo, id)}, by).Int64()
	if err != nil {
		return false, fmt.Errorf("%w: mark run %s reconciled: %v", reclaim.ErrTrackerUnavailable, id, err)
	}
	return n == 1, nil
}

// loadRun reads a record and, when it is running while its lock is not held
// by its token, marks it interrupted: compare-and-swap on the record's
// version, so of two readers racing, one marks and the other finds the
// version moved, reads again and returns the winner's state.
func (t *Tracker) loadRun(ctx context.Context, repo, id, marker string, withReport bool) (gcrun.State, bool, error) {
	for attempt := 0; ; attempt++ {
		h, err := t.readRecord(ctx, repo, id, withReport)
		if err != nil {
			return gcrun.State{}, false, err
		}
		if h["id"] == "" {
			return gcrun.State{}, false, nil
		}
		if gcrun.Status(h["status"]) != gcrun.StatusRunning || attempt >= 10 {
			st, err := t.runState(ctx, repo, h)
			return st, err == nil, err
		}
		verdict := t.deletionsVerdict(ctx, h)
		if t.beforeMark != nil {
			t.beforeMark(marker)
		}
		now, err := t.Now(ctx)
		if err != nil {
			return gcrun.State{}, false, err
		}
		n, err := markScript.Run(ctx, t.c, []string{t.lockKey(repo), t.runKey(repo, id)},
			h["v"], marker, verdict, now.UnixMilli()).Int64()
		if err != nil {
			return gcrun.State{}, false, fmt.Errorf("%w: mark run %s: %v", reclaim.ErrTrackerUnavailable, id, err)
		}
		if n == -1 { // alive: its lock is held
			st, err := t.runState(ctx, repo, h)
			return st, err == nil, err
		}
		if n == 1 {
			metricInterrupted.Inc()
		}
		// n == 1: marked; n == 0: lost the race or the run wrote ahead.
		// Either way the record changed: read it again.
	}
}

// recordFields are the fields of a run record a reader needs; "report"
// is read only when asked for: it can be large.
var recordFields = []string{"id", "status", "started", "step", "kind", "object", "deletions", "v",
	"interrupted_at", "marked_by", "verdict", "reconciled_by"}

// readRecord reads the fields of run id that are set.
func (t *Tracker) readRecord(ctx context.Context, repo, id string, withReport bool) (map[string]string, error) {
	fields := recordFields
	if withReport {
		fields = append(slices.Clip(fields), "report")
	}
	vals, err := t.c.HMGet(ctx, t.runKey(repo, id), fields...).Result()
	if err != nil {
		return nil, fmt.Errorf("%w: read run %s: %v", reclaim.ErrTrackerUnavailable, id, err)
	}
	h := make(map[string]string, len(fields))
	for i, v := range vals {
		if s, ok := v.(string); ok {
			h[fields[i]] = s
		}
	}
	return h, nil
}

// deletionsVerdict says whether the run had started deleting: "1" yes, "0"
// no, "" unknown. It writes "deletions 1" ahead of its first delete, so "0"
// is "no", unless the recording epoch moved after the run began: then Redis
// may have lost writes (a failover), the ahead-write among them.
func (t *Tracker) deletionsVerdict(ctx context.Context, h map[string]string) string {
	switch h["deletions"] {
	case "1":
		return "1"
	case "0":
		started, err := strconv.ParseInt(h["started"], 10, 64)
		if err != nil {
			return ""
		}
		since, err := t.RecordingSince(ctx)
		if err != nil && !errors.Is(err, reclaim.ErrRedisEvicts) {
			return ""
		}
		if errors.Is(err, reclaim.ErrRedisEvicts) || since.UnixMilli() > started {
			return ""
		}
		return "0"
	}
	return ""
}

// runState turns a record into a RunState.
func (t *Tracker) runState(ctx context.Context, repo string, h map[string]string) (gcrun.State, error) {
	st := gcrun.State{ID: h["id"], Repo: repo, Status: gcrun.Status(h["status"]), Step: gcrun.Step(h["step"]),
		LastKind: reclaim.ObjectKind(h["kind"]), LastObject: h["object"], MarkedBy: h["marked_by"], ReconciledBy: h["reconciled_by"]}
	if r, ok := h["report"]; ok {
		st.Report = []byte(r)
	}
	st.StartedAt = unixMilli(h["started"])
	st.InterruptedAt = unixMilli(h["interrupted_at"])
	v, ok := h["verdict"]
	if st.Status != gcrun.StatusInterrupted || !ok {
		v = h["deletions"]
		if v == "0" && st.Status != gcrun.StatusRunning {
			v = "" // only a verdict speaks for a run that did not end
		}
	}
	switch v {
	case "1", "0":
		b := v == "1"
		st.DeletionsStarted = &b
	}
	if st.Status == gcrun.StatusInterrupted {
		u, err := t.c.SMembers(ctx, t.unlinkedKey(repo, st.ID)).Result()
		if err != nil {
			return st, fmt.Errorf("%w: read run %s: %v", reclaim.ErrTrackerUnavailable, st.ID, err)
		}
		st.Unlinked = u
	}
	return st, nil
}

func unixMilli(s string) time.Time {
	ms, err := strconv.ParseInt(s, 10, 64)
	if err != nil || ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}
