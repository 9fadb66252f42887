package collector

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/reclaim"
)

// memUsage is an in-memory UsageStore on a settable clock. Its due set is
// a fake review queue keyed by repository name: the real store claims
// with the review queue's script too.
type memUsage struct {
	mu     sync.Mutex
	clock  func() time.Time
	recs   map[string]reclaim.Usage
	due    *fakeQueue
	cursor string
	puts   int
}

func newMemUsage(clock func() time.Time) *memUsage {
	return &memUsage{clock: clock, recs: map[string]reclaim.Usage{}, due: newFakeQueue(clock)}
}

func dueKey(repo string) digest.Digest { return digest.Digest(repo) }

func (m *memUsage) PutUsage(ctx context.Context, u reclaim.Usage, due bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.puts++
	m.recs[u.Repository] = u
	if due {
		m.due.add(dueKey(u.Repository), m.clock())
	}
	return nil
}

func (m *memUsage) DeleteUsage(ctx context.Context, repo string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.recs, repo)
	m.due.mu.Lock()
	defer m.due.mu.Unlock()
	delete(m.due.due, dueKey(repo))
	delete(m.due.leases, dueKey(repo))
	return nil
}

func (m *memUsage) MarkUsageDue(ctx context.Context, repo string) error {
	m.due.add(dueKey(repo), m.clock())
	return nil
}

func (m *memUsage) ClaimDueUsage(ctx context.Context, n int, lease time.Duration) ([]reclaim.UsageClaim, error) {
	items, err := m.due.Claim(ctx, n, lease)
	out := make([]reclaim.UsageClaim, 0, len(items))
	for _, it := range items {
		out = append(out, reclaim.UsageClaim{Repo: string(it.Blob), Lease: it.Lease})
	}
	return out, err
}

func (m *memUsage) DoneDueUsage(ctx context.Context, c reclaim.UsageClaim) error {
	return m.due.Done(ctx, reclaim.ReviewItem{Blob: dueKey(c.Repo), Lease: c.Lease})
}

func (m *memUsage) StaleUsage(ctx context.Context, n int, before time.Time) ([]string, error) {
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

func (m *memUsage) MissingUsage(ctx context.Context, repos []string) ([]string, error) {
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

func (m *memUsage) UsageCursor(ctx context.Context) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cursor, nil
}

func (m *memUsage) SetUsageCursor(ctx context.Context, c string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cursor = c
	return nil
}

func (m *memUsage) record(repo string) (reclaim.Usage, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	u, ok := m.recs[repo]
	return u, ok
}

func (m *memUsage) isDue(repo string) bool {
	_, ok := m.due.dueAt(dueKey(repo))
	return ok
}
