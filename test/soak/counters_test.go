package soak

import (
	"fmt"
	"sort"
	"strings"
	"sync"
)

// counters is a set of named counts, safe for concurrent use.
type counters struct {
	mu sync.Mutex
	m  map[string]int64
}

func (c *counters) add(k string, n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]int64{}
	}
	c.m[k] += n
}

func (c *counters) get(k string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[k]
}

func (c *counters) sum(prefix string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int64
	for k, v := range c.m {
		if strings.HasPrefix(k, prefix) {
			n += v
		}
	}
	return n
}

func (c *counters) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	keys := make([]string, 0, len(c.m))
	for k := range c.m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "  %-48s %d\n", k, c.m[k])
	}
	return b.String()
}
