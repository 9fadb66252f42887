package collector

import (
	"context"
	"slices"
	"strings"
)

// Runs returns the reports of the runs this collector remembers (the last
// 24 hours, at most 1,000 finished ones, in this process's
// memory), newest first; running ones have status "running".
func (c *Collector) Runs() []*Report {
	c.mu.Lock()
	c.gcLocked(c.cfg.Now())
	out := make([]*Report, 0, len(c.runs))
	for _, r := range c.runs {
		out = append(out, r.report)
	}
	c.mu.Unlock()
	sortRuns(out)
	return out
}

// RecentRuns returns the runs this collector remembers together with up
// to n of the registry's most recent run records: runs of other instances,
// and runs whose process died, which read "interrupted" (this reader marks
// them, if it is the first to find them). Newest first. When the records
// cannot be read, it returns this process's runs and the error.
func (c *Collector) RecentRuns(ctx context.Context, n int) ([]*Report, error) {
	out := c.Runs()
	if c.recorder == nil {
		return out, nil
	}
	states, err := c.recorder.RecentRuns(ctx, n, "instance "+c.instance)
	if err != nil {
		return out, err
	}
	here := make(map[string]bool, len(out))
	for _, rep := range out {
		here[rep.RunID] = true
	}
	for _, st := range states {
		if here[st.ID] {
			continue // this process's own report is the fresher one
		}
		rep, err := reportOf(st)
		if err != nil {
			continue // a record this version cannot read: GET /gc/v1/runs/<id> says why
		}
		out = append(out, rep)
	}
	sortRuns(out)
	return out, nil
}

func sortRuns(out []*Report) {
	slices.SortFunc(out, func(a, b *Report) int {
		if c := b.StartedAt.Compare(a.StartedAt); c != 0 {
			return c
		}
		return strings.Compare(a.RunID, b.RunID)
	})
}

// countFreed adds what a collect or a reclaimer tick deleted to the
// daily sums, when the collector keeps them (Config.Freed). Best effort: the sums are for
// people; the Prometheus counters and the reports are the record.
func (c *Collector) countFreed(ctx context.Context, bytes int64, objects int) {
	if c.cfg.Freed == nil || objects == 0 {
		return
	}
	_ = c.cfg.Freed.CountFreed(context.WithoutCancel(ctx), c.cfg.Now(), bytes, objects)
}
