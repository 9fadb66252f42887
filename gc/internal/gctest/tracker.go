// Package gctest holds the fixtures the tests of gc/collector and
// gc/reclaimer share: an in-memory tracker on a settable clock, a storage
// tree written in Distribution's layout, a reverse-link index computed
// from it, an in-memory review queue and usage store, and the rig that
// counts what a run costs. It imports neither package, so the tests of
// both (internal ones included) can use it; each adapts Tracker.Fence to
// its own Hold type.
package gctest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/reclaim-registry/reclaim/reclaim"
)

// T0 is the start of the fixtures' time: Tracker records from it.
var T0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// ErrBoom is the error the fakes fail with when told to.
var ErrBoom = errors.New("boom")

// Tracker is an in-memory access tracker with a settable clock. Hold Mu
// to change its fields while a run may read them.
type Tracker struct {
	Mu       sync.Mutex
	Now      time.Time
	Since    time.Time
	SinceErr error
	Access   map[reclaim.Object]time.Time
	Fences   map[reclaim.Object]bool
	Locks    map[string]bool
	OnFence  func(o reclaim.Object)      // runs before the fence is decided: a racing client
	Expire   func(o reclaim.Object) bool // true: o's fence has expired by the time of its delete
	OnUnlock func(repo string)           // runs after a repository lock was given back
	FenceErr error
}

// NewTracker returns a tracker recording since T0, two days on.
func NewTracker() *Tracker {
	return &Tracker{Now: T0.Add(48 * time.Hour), Since: T0, Access: map[reclaim.Object]time.Time{},
		Fences: map[reclaim.Object]bool{}, Locks: map[string]bool{}}
}

// Clock is the tracker's time.
func (f *Tracker) Clock() time.Time { f.Mu.Lock(); defer f.Mu.Unlock(); return f.Now }

// Touch records an access to o now.
func (f *Tracker) Touch(o reclaim.Object) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	f.Access[o] = f.Now
}

func (f *Tracker) RecordingSince(ctx context.Context) (time.Time, error) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	return f.Since, f.SinceErr
}

func (f *Tracker) LastAccess(ctx context.Context, o reclaim.Object) (time.Time, bool, error) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	if errors.Is(f.SinceErr, reclaim.ErrTrackerUnavailable) {
		// the real tracker reads records whatever its epoch says, but not
		// from a Redis that does not answer
		return time.Time{}, false, f.SinceErr
	}
	t, ok := f.Access[o]
	return t, ok, nil
}

// FenceHold fences o as the collector's Tracker.Fence does; the test
// packages wrap it in a Fence returning their Hold.
func (f *Tracker) FenceHold(ctx context.Context, o reclaim.Object, window, lease time.Duration) (*Hold, error) {
	if f.OnFence != nil {
		f.OnFence(o)
	}
	f.Mu.Lock()
	defer f.Mu.Unlock()
	if f.FenceErr != nil {
		return nil, f.FenceErr
	}
	if f.Fences[o] {
		return nil, reclaim.ErrFenced
	}
	if t, ok := f.Access[o]; ok && t.After(f.Now.Add(-window)) {
		return nil, reclaim.ErrRecentlyAccessed
	}
	f.Fences[o] = true
	return &Hold{f: f, o: o}, nil
}

// Hold is a fence of the fake tracker. A test expires it by deleting the
// object from Tracker.Fences (or by setting Tracker.Expire).
type Hold struct {
	f *Tracker
	o reclaim.Object
}

func (h *Hold) Confirm(context.Context) error {
	h.f.Mu.Lock()
	defer h.f.Mu.Unlock()
	if h.f.Expire != nil && h.f.Expire(h.o) {
		delete(h.f.Fences, h.o)
	}
	if !h.f.Fences[h.o] {
		return reclaim.ErrFenceLost
	}
	return nil
}

func (h *Hold) Release(context.Context) error {
	h.f.Mu.Lock()
	defer h.f.Mu.Unlock()
	delete(h.f.Fences, h.o)
	return nil
}

func (f *Tracker) LockRepository(ctx context.Context, repo string, lease time.Duration) (context.Context, func(), error) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	if f.Locks[repo] {
		return nil, nil, reclaim.ErrRepositoryBusy
	}
	f.Locks[repo] = true
	held, cancel := context.WithCancel(ctx)
	onUnlock := f.OnUnlock
	return held, func() {
		cancel()
		f.Mu.Lock()
		delete(f.Locks, repo)
		f.Mu.Unlock()
		if onUnlock != nil {
			onUnlock(repo)
		}
	}, nil
}

// Wait receives from c, failing t after 30 seconds.
func Wait[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}
