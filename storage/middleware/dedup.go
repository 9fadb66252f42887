package middleware

import (
	"sync"
	"time"

	"github.com/reclaim-registry/reclaim/reclaim"
)

// accessTimes remembers when objects had their access recorded.
type accessTimes map[reclaim.Object]time.Time

// oldest returns the age at now of the oldest record among objs; ok is
// false when one of them has none.
func (a accessTimes) oldest(objs []reclaim.Object, now time.Time) (age time.Duration, ok bool) {
	for _, o := range objs {
		t, seen := a[o]
		if !seen {
			return 0, false
		}
		age = max(age, now.Sub(t))
	}
	return age, true
}

func (a accessTimes) set(objs []reclaim.Object, at time.Time) {
	for _, o := range objs {
		a[o] = at
	}
}

// dedup remembers, per process, which objects had their access recorded
// moments ago, so a hot blob costs at most one Redis write per interval.
type dedup struct {
	interval time.Duration
	mu       sync.Mutex
	seen     accessTimes
}

const dedupMaxEntries = 1 << 16

func (d *dedup) recent(objs []reclaim.Object) bool {
	if d.interval <= 0 {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	age, ok := d.seen.oldest(objs, time.Now())
	return ok && age < d.interval
}

// forget drops o, so the next access of it goes to Redis (and sees the
// tombstone just written).
func (d *dedup) forget(o reclaim.Object) {
	d.mu.Lock()
	delete(d.seen, o)
	d.mu.Unlock()
}

func (d *dedup) record(objs []reclaim.Object, at time.Time) {
	if d.interval <= 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.seen == nil || len(d.seen) >= dedupMaxEntries {
		// entries older than the interval are worthless; dropping all is
		// simpler than an LRU and costs at most one extra touch per blob
		d.seen = accessTimes{}
	}
	d.seen.set(objs, at)
}
