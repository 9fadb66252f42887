package gc

import (
	"context"
	"sort"
	"sync"
	"time"
)

// memUsage is an in-memory UsageStore on a settable clock.
type memUsage struct {
	mu     sync.Mutex
	clock  func() time.Time
	recs   map[string]Usage
	due    map[string]int64 // repo -> due unix ms (a claim: its lease score)
	cursor string
	puts   int
}

func newMemUsage(clock func() time.Time) *memUsage {
	return &memUsage{clock: clock, recs: map[string]Usage{}, due: map[string]int64{}}
}

func (m *memUsage) PutUsage(ctx context.Context, u Usage, due bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.puts++
	m.recs[u.Repository] = u
	if due {
		m.due[u.Repository] = m.clock().UnixMilli()
	}
	return nil
}

func (m *memUsage) DeleteUsage(ctx context.Context, repo string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.recs, repo)
	delete(m.due, repo)
	return nil
}

func (m *memUsage) MarkUsageDue(ctx context.Context, repo string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.due[repo] = m.clock().UnixMilli()
	return nil
}

func (m *memUsage) ClaimDueUsage(ctx context.Context, n int, lease time.Duration) ([]UsageClaim, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock().UnixMilli()
	var repos []string
	for r, t := range m.due {
		if t <= now {
			repos = append(repos, r)
		}
	}
	sort.Strings(repos)
	var out []UsageClaim
	for _, r := range repos[:min(n, len(repos))] {
		m.due[r] = now + lease.Milliseconds()
		out = append(out, UsageClaim{Repo: r, Lease: m.due[r]})
	}
	return out, nil
}

func (m *memUsage) DoneDueUsage(ctx context.Context, c UsageClaim) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.due[c.Repo] == c.Lease {
		delete(m.due, c.Repo)
	}
	return nil
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

func (m *memUsage) record(repo string) (Usage, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	u, ok := m.recs[repo]
	return u, ok
}

func (m *memUsage) isDue(repo string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.due[repo]
	return ok
}
