package redisstate

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// LockRepository takes the per-repository GC lease and renews it every
// lease/3 until unlock is called. ErrRepositoryBusy when another run holds
// it.
//
// held is ctx, cancelled (its cause wraps ErrLockLost) as soon as the lock
// is known lost: a renewal found it gone or taken by another token, or no
// renewal succeeded for lease/2 (Redis unreachable: it may expire unseen).
// The run does its work under held, so a run that lost its lock stops
// instead of going on beside the next one. Renewals stop when held ends.
func (t *Tracker) LockRepository(ctx context.Context, repo string, lease time.Duration) (held context.Context, unlock func(), err error) {
	if !layout.ValidRepo(repo) || lease < 3*time.Millisecond {
		return nil, nil, fmt.Errorf("redisstate: LockRepository(%q, %v): bad arguments", repo, lease)
	}
	key := t.lockKey(repo)
	tok, err := token()
	if err != nil {
		return nil, nil, err
	}
	ok, err := t.c.SetNX(ctx, key, tok, lease).Result()
	if err != nil {
		return nil, nil, fmt.Errorf("%w: lock %s: %v", reclaim.ErrTrackerUnavailable, repo, err)
	}
	if !ok {
		return nil, nil, fmt.Errorf("%w: %s", reclaim.ErrRepositoryBusy, repo)
	}
	held, unlock = t.holdLock(ctx, repo, key, tok, lease)
	return held, unlock, nil
}

// holdLock renews the lock under key, which tok holds, until unlock.
func (t *Tracker) holdLock(ctx context.Context, repo, key, tok string, lease time.Duration) (held context.Context, unlock func()) {
	held, lost := context.WithCancelCause(ctx)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t.renewLock(held, lost, stop, repo, key, tok, lease)
	}()
	var once sync.Once
	return held, func() {
		once.Do(func() {
			close(stop)
			<-done
			lost(nil)
			_ = releaseScript.Run(context.WithoutCancel(ctx), t.c, []string{key}, tok).Err()
		})
	}
}

// renewLock renews the lock under key every lease/3 until stop or held
// ends, and calls lost as soon as the lock is known lost.
func (t *Tracker) renewLock(held context.Context, lost context.CancelCauseFunc, stop <-chan struct{}, repo, key, tok string, lease time.Duration) {
	tick := time.NewTicker(lease / 3)
	defer tick.Stop()
	lastOK := time.Now()
	for {
		select {
		case <-stop:
			return
		case <-held.Done():
			return
		case <-tick.C:
		}
		start := time.Now()
		rctx, cancel := context.WithTimeout(held, lease/3)
		n, err := renewScript.Run(rctx, t.c, []string{key}, tok, lease.Milliseconds()).Int64()
		cancel()
		switch {
		case err == nil && n == 1:
			lastOK = start
		case err == nil:
			lost(fmt.Errorf("%w: %s: taken away or expired", reclaim.ErrLockLost, repo))
			return
		case time.Since(lastOK) >= lease/2:
			lost(fmt.Errorf("%w: %s: not renewed for %v: %v", reclaim.ErrLockLost, repo, time.Since(lastOK).Round(time.Millisecond), err))
			return
		}
	}
}
