package middleware

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/distribution/distribution/v3/configuration"
	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/redis/go-redis/v9"

	"github.com/reclaim-registry/reclaim/internal/config"
	"github.com/reclaim-registry/reclaim/internal/rlog"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/redisstate"
	"github.com/reclaim-registry/reclaim/redisstate/pulls"
	"github.com/reclaim-registry/reclaim/storage/budget"
	"github.com/reclaim-registry/reclaim/storage/linkdb"
)

// MiddlewareName is the name to list under `middleware: storage:`.
const MiddlewareName = config.MiddlewareName

// Env is one process's view of the link database: the wrapped driver, the
// driver below it, the tracker and the options. Distribution's requests, the
// GC API, the reclaimer and the referrers index of one registry share one
// Env (registry.New builds it with Open), so they share one tracker and one
// dedup table.
type Env struct {
	// Driver is the storage driver with the reclaim middleware: delete
	// through it so reverse links and tombstones follow.
	Driver storagedriver.StorageDriver
	// Raw is the driver below the middleware, within GC's storage budget:
	// calls with a context marked budget.Mark wait on Budget, others pass
	// straight through.
	Raw storagedriver.StorageDriver
	// Budget is GC's storage budget (the options' budget block).
	Budget *budget.Budget
	// Tracker records accesses and takes fences.
	Tracker *redisstate.Tracker
	// Links reads and writes reverse links (on Raw).
	Links *linkdb.ReverseLinks
	// Window is the protection window: GC must not delete what was
	// accessed more recently than this.
	Window time.Duration
	// Embedded is true when Redis is the in-process miniredis.
	Embedded bool
	// Pulls records manifest pulls for retention's pulled_within; nil
	// when retention.pulledwithin is not configured (nothing recorded).
	Pulls *pulls.Store

	ignorePulls pullFilter
	pullDedup   *dedup

	opts  config.Options
	dedup *dedup
	// distCache is Distribution's Redis (when its blob descriptor cache is
	// "redis"), for Evict.
	distCache redis.UniversalClient
	mini      *miniredis.Miniredis
	bg        context.Context // lives until Close: deferred re-checks
	stop      context.CancelFunc
	kept      chan struct{} // closed when the epoch keeper has returned
	closeOnce sync.Once
	// conf is the configuration Open bound the Env to (nil from NewEnv).
	conf *configuration.Configuration
	// skew is added to the clock of the request scopes' checks (now):
	// tests move it on when they let a window pass (Age), as they move
	// Redis's access records into the past.
	skew atomic.Int64
}

// Age moves the clock the request scopes time their checks by d forward,
// for tests that let a window pass without sleeping through it: with
// Redis's access records moved d into the past (storagetest.Age), a
// request in flight sees its checks d older, as it would d later.
func (e *Env) Age(d time.Duration) { e.skew.Add(int64(d)) }

// fresh is how long a request trusts a check it made without asking Redis
// again before a write that depends on it (dataBehind): half the window,
// less the dedup interval (the age a check reused within the request may
// already have had). A check's access record refuses every fence for a
// window, so the other half is margin for clock rates and the write itself.
func (e *Env) fresh() time.Duration {
	f := e.Window/2 - e.opts.Dedup
	if f < 0 {
		return 0
	}
	return f
}

// now is the clock a request's fence checks are timed by (scope.covered).
func (e *Env) now() time.Time {
	return time.Now().Add(time.Duration(e.skew.Load()))
}

// NewEnv builds an Env around below, recording into the Redis opts names
// (an embedded one when it names none). Zero options take their defaults.
// Open is NewEnv on the driver Distribution would build, bound to its
// configuration; tests and tools call NewEnv directly.
func NewEnv(ctx context.Context, below storagedriver.StorageDriver, opts config.Options) (*Env, error) {
	opts, err := opts.WithDefaults()
	if err != nil {
		return nil, err
	}
	b := budget.New(budget.Options{Rate: max(opts.Budget.Rate, 0), InFlight: opts.Budget.InFlight})
	below = budget.Wrap(below, b)
	e := &Env{Raw: below, Budget: b, Window: opts.Window, opts: opts, dedup: &dedup{interval: opts.Dedup}}
	if len(opts.Redis.Addrs) == 0 {
		m := miniredis.NewMiniRedis()
		if err := m.Start(); err != nil {
			return nil, fmt.Errorf("storage: start embedded redis: %w", err)
		}
		e.mini, e.Embedded = m, true
		opts.Redis.Addrs = []string{m.Addr()}
		rlog.From(ctx).Warnf("reclaim: no redis configured; using an embedded in-process redis at %s. "+
			"Access records start now and die with the process, so GC will not delete shared blobs until it has recorded for a full window (%v)", m.Addr(), opts.Window)
	}
	rlog.QuietRedis() // the client library's own lines: one a minute
	client := opts.OpenRedis()
	t, err := redisstate.NewTracker(client, redisstate.TrackerOptions{Prefix: opts.Prefix, AccessTTL: opts.AccessTTL, Timeout: opts.Timeout, Embedded: e.Embedded})
	if err != nil {
		client.Close()
		if e.mini != nil {
			e.mini.Close()
		}
		return nil, err
	}
	e.Tracker = t
	if opts.Retention.PulledWithin > 0 {
		e.Pulls = pulls.New(client, opts.Prefix, opts.Timeout)
		e.ignorePulls, e.pullDedup = newPullFilter(opts.Retention.IgnorePullsFrom), &dedup{interval: pullDedup}
	}
	e.Links = linkdb.NewReverseLinks(below)
	e.Driver = wrap(below, e)
	e.distCache = opts.OpenDescriptorCache()
	if marked, err := linkdb.MarkCompleteIfEmpty(ctx, below); err != nil {
		rlog.From(ctx).WithError(err).Warn("reclaim: could not check whether the storage is empty; GC deletes no blob until `registry linkdb rebuild` has run")
	} else if marked {
		rlog.From(ctx).Info("reclaim: storage holds no repository yet: link database marked complete")
	}
	if err := t.StartRecording(ctx); err != nil {
		// Said once, here, in words an operator acts on; the tracker keeps
		// trying every EpochInterval and says when Redis is back.
		rlog.From(ctx).WithError(err).Errorf("reclaim: Redis at %s cannot be reached: pushes answer 503 and GC deletes nothing until it answers; pulls go on. Retrying every %v",
			strings.Join(opts.Redis.Addrs, ","), opts.EpochInterval)
	}
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	e.bg, e.stop, e.kept = bg, cancel, make(chan struct{})
	go func() {
		defer close(e.kept)
		t.KeepRecording(bg, opts.EpochInterval)
	}()
	return e, nil
}

// Close stops the epoch keeper, closes the Redis clients (and the embedded
// Redis) and unbinds the Env from its configuration. It does not close the
// storage driver.
func (e *Env) Close() error {
	e.closeOnce.Do(func() {
		unbind(e)
		e.stop()
		// An INFO or script in flight must end before Redis goes away
		// (the embedded one cannot close under a running command).
		<-e.kept
		e.Tracker.Client().Close()
		if e.distCache != nil {
			e.distCache.Close()
		}
		if e.mini != nil {
			e.mini.Close()
		}
	})
	return nil
}

// Evict makes stale blob-descriptor cache entries of o stop answering: it
// leaves a tombstone the descriptor wrapper checks on every Stat (which then
// drops in-memory cache entries), and deletes Distribution's own Redis cache
// keys when its cache is "redis". The middleware calls it for every forward
// link or blob it sees deleted; GC deleting through Env.Driver needs nothing
// else.
func (e *Env) Evict(ctx context.Context, o reclaim.Object) error {
	e.dedup.forget(o)
	err := e.Tracker.MarkGone(ctx, o)
	if e.distCache != nil {
		keys := []string{"blobs::" + o.Blob.String()}
		if o.Repo != "" {
			keys = []string{"repository::" + o.Repo + "::blobs::" + o.Blob.String()}
			if cerr := e.distCache.SRem(ctx, "repository::"+o.Repo+"::blobs", o.Blob.String()).Err(); cerr != nil {
				err = errors.Join(err, fmt.Errorf("%w: %v", reclaim.ErrTrackerUnavailable, cerr))
			}
		}
		if cerr := e.distCache.Del(ctx, keys...).Err(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("%w: %v", reclaim.ErrTrackerUnavailable, cerr))
		}
	}
	return err
}

func (e *Env) clearGone(ctx context.Context, gone []redisstate.Tombstone) {
	if err := e.Tracker.ClearGone(ctx, gone); err != nil {
		rlog.From(ctx).WithError(err).Debug("reclaim: could not clear a tombstone")
	}
}
