package gc

import (
	"slices"
	"strings"
)

// Runs returns the reports of the runs this collector remembers (the last
// DefaultRunTTL, at most maxStoredRuns finished ones, in this process's
// memory), newest first; running ones have status "running".
func (c *Collector) Runs() []*Report {
	c.mu.Lock()
	c.gcLocked(c.cfg.Now())
	out := make([]*Report, 0, len(c.runs))
	for _, r := range c.runs {
		out = append(out, r.report)
	}
	c.mu.Unlock()
	slices.SortFunc(out, func(a, b *Report) int {
		if c := b.StartedAt.Compare(a.StartedAt); c != 0 {
			return c
		}
		return strings.Compare(a.RunID, b.RunID)
	})
	return out
}
