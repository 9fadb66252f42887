package gctest

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/reclaim"
)

// Queue is an in-memory review queue on a settable clock.
type Queue struct {
	mu     sync.Mutex
	clock  func() time.Time
	due    map[digest.Digest]time.Time
	leases map[digest.Digest]int64
	next   int64
	// ClaimErr, when set, fails every Claim; Claims counts the calls.
	ClaimErr error
	Claims   int
}

// NewQueue returns an empty queue on clock.
func NewQueue(clock func() time.Time) *Queue {
	return &Queue{clock: clock, due: map[digest.Digest]time.Time{}, leases: map[digest.Digest]int64{}}
}

// Add queues d, due at due.
func (q *Queue) Add(d digest.Digest, due time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.due[d] = due
	delete(q.leases, d)
}

func (q *Queue) Claim(ctx context.Context, n int, lease time.Duration) ([]reclaim.ReviewItem, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.Claims++
	if q.ClaimErr != nil {
		return nil, q.ClaimErr
	}
	now := q.clock()
	var out []reclaim.ReviewItem
	for d, t := range q.due {
		if len(out) == n {
			break
		}
		if !t.After(now) {
			q.next++
			q.due[d], q.leases[d] = now.Add(lease), q.next
			out = append(out, reclaim.ReviewItem{Blob: d, Due: t, Lease: q.next})
		}
	}
	return out, nil
}

func (q *Queue) Done(ctx context.Context, items ...reclaim.ReviewItem) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, it := range items {
		if q.leases[it.Blob] == it.Lease {
			delete(q.due, it.Blob)
			delete(q.leases, it.Blob)
		}
	}
	return nil
}

func (q *Queue) Requeue(ctx context.Context, it reclaim.ReviewItem, due time.Time) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.leases[it.Blob] == it.Lease {
		q.due[it.Blob] = due
		delete(q.leases, it.Blob)
	}
	return nil
}

func (q *Queue) Len(ctx context.Context) (int64, int64, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	var due int64
	for _, t := range q.due {
		if !t.After(q.clock()) {
			due++
		}
	}
	return int64(len(q.due)), due, nil
}

// DueAt is when d is due; ok is false when it is not queued.
func (q *Queue) DueAt(d digest.Digest) (time.Time, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	t, ok := q.due[d]
	return t, ok
}

// remove drops d and its lease.
func (q *Queue) remove(d digest.Digest) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.due, d)
	delete(q.leases, d)
}

// Usage is an in-memory usage store on a settable clock. Its due set is
// a Queue keyed by repository name: the real store claims with the review
// queue's script too.
type Usage struct {
	mu     sync.Mutex
	clock  func() time.Time
	recs   map[string]reclaim.Usage
	due    *Queue
	cursor string
}

// NewUsage returns an empty store on clock.
func NewUsage(clock func() time.Time) *Usage {
	return &Usage{clock: clock, recs: map[string]reclaim.Usage{}, due: NewQueue(clock)}
}

func dueKey(repo string) digest.Digest { return digest.Digest(repo) }

func (m *Usage) PutUsage(ctx context.Context, u reclaim.Usage, due bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.recs[u.Repository] = u
	if due {
		m.due.Add(dueKey(u.Repository), m.clock())
	}
	return nil
}

func (m *Usage) DeleteUsage(ctx context.Context, repo string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.recs, repo)
	m.due.remove(dueKey(repo))
	return nil
}

func (m *Usage) MarkUsageDue(ctx context.Context, repo string) error {
	m.due.Add(dueKey(repo), m.clock())
	return nil
}

func (m *Usage) ClaimDueUsage(ctx context.Context, n int, lease time.Duration) ([]reclaim.UsageClaim, error) {
	items, err := m.due.Claim(ctx, n, lease)
	out := make([]reclaim.UsageClaim, 0, len(items))
	for _, it := range items {
		out = append(out, reclaim.UsageClaim{Repo: string(it.Blob), Lease: it.Lease})
	}
	return out, err
}

func (m *Usage) DoneDueUsage(ctx context.Context, c reclaim.UsageClaim) error {
	return m.due.Done(ctx, reclaim.ReviewItem{Blob: dueKey(c.Repo), Lease: c.Lease})
}

func (m *Usage) StaleUsage(ctx context.Context, n int, before time.Time) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for r, u := range m.recs {
		if u.ComputedAt.Before(before) {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return m.recs[out[i]].ComputedAt.Before(m.recs[out[j]].ComputedAt) })
	return out[:min(n, len(out))], nil
}

func (m *Usage) MissingUsage(ctx context.Context, repos []string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, r := range repos {
		if _, ok := m.recs[r]; !ok {
			out = append(out, r)
		}
	}
	return out, nil
}

func (m *Usage) UsageCursor(ctx context.Context) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cursor, nil
}

func (m *Usage) SetUsageCursor(ctx context.Context, c string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cursor = c
	return nil
}

// Record is repo's record.
func (m *Usage) Record(repo string) (reclaim.Usage, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	u, ok := m.recs[repo]
	return u, ok
}

// IsDue reports whether repo is marked due.
func (m *Usage) IsDue(repo string) bool {
	_, ok := m.due.DueAt(dueKey(repo))
	return ok
}

// Cursor is where the catalog walk stands.
func (m *Usage) Cursor() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cursor
}
