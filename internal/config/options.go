// Package config is Reclaim's configuration: the options of the `reclaim`
// entry under `middleware: storage:` in Distribution's config.yml, decoded
// once and strictly into Options. The storage middleware, the GC API, the
// reclaimer and every command read that one value.
//
//	middleware:
//	  storage:
//	    - name: reclaim
//	      options:
//	        window: 24h           # protection window W, for everything below (> 0; absent: 24h)
//	        redis: {addrs: [host:port], username, password, db, mastername, clientname,
//	                sentinelusername, sentinelpassword, tls: {...}}
//	        prefix: "reclaim:"
//	        accessttl: 168h       # default max(7 days, 4 windows)
//	        dedup: 1s
//	        fencewait: 2s
//	        fencepoll: 100ms
//	        timeout: 1s           # per registry-side Redis call
//	        epochinterval: 5s
//	        gc:
//	          enabled: false      # serve the GC API
//	          cap: 10000          # max link deletions per run
//	          untagged: delete    # delete | keep
//	          allowuntaggedoverride: false  # with keep: may a request ask untagged=delete?
//	          dryruns: 4          # dry runs walking at once on this instance
//	          dryrunwait: 5s      # how long one more waits for a slot (0s: none) before a 429
//	        reclaimer:
//	          enabled: false      # the background reclaimer's kill switch
//	          interval: 1m
//	          batch: 100
//	          workers: 4          # default: gc's
//	          lease: 1m           # default: gc's, max(10 intervals, 1m)
//	          usagerefresh: 4     # usage estimates refreshed per tick; 0: none
//	          usagemaxage: 1h     # an estimate older than this is refreshed
//	          scrubrepos: 2       # repositories whose reverse links a tick scrubs; 0: none
//	        http:                 # the registry's HTTP server (the same defaults without this entry)
//	          readheadertimeout: 30s  # a request's headers must arrive within this
//	          bodyidletimeout: 1m     # a request body may send nothing for at most this
//	          idletimeout: 2m         # a kept-alive connection may wait this long for its next request
//
// Keys match case-insensitively (Distribution's environment overrides write
// them in lower case); an unknown key, a key given twice, a value of the
// wrong type or out of range is an *OptionError naming it, so a typo never
// silently changes a policy.
package config

import (
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// MiddlewareName is the name of the entry under `middleware: storage:`.
const MiddlewareName = "reclaim"

// Defaults of the options an operator sees. gc keeps defaults of its own
// for callers that leave a value zero; these are the ones config.yml gets.
const (
	defaultWindow            = 24 * time.Hour
	defaultCap               = 10000
	defaultReclaimerInterval = time.Minute
	defaultReclaimerBatch    = 100
	defaultUsageRefresh      = 4
	defaultUsageMaxAge       = time.Hour
	defaultDryRuns           = 4
	defaultDryRunWait        = 5 * time.Second
	defaultScrubRepos        = 2
	// GC's storage budget (docs/operations.md, "GC's storage budget"):
	// 1,000 requests/s on an object store is under a third of what S3
	// serves one prefix partition (3,500 writes, 5,500 reads a second),
	// so a new bucket's single partition keeps most of it for clients; a
	// local filesystem does not throttle, so there only the in-flight
	// bound applies.
	defaultBudgetRate     = 1000
	defaultBudgetInFlight = 32
)

// DefaultBudgetRate is the `budget.rate` of a config that sets none, for
// the storage driver named driver: none on a local filesystem (and in
// memory), defaultBudgetRate elsewhere.
func DefaultBudgetRate(driver string) int {
	switch driver {
	case "filesystem", "inmemory":
		return 0
	}
	return defaultBudgetRate
}

// Options are the decoded options of the reclaim middleware entry.
type Options struct {
	// Redis is where access records, fences and the review queue live: the
	// entry's redis block, else Distribution's `redis:` section. No address
	// means an embedded in-process Redis (storage/middleware starts it).
	Redis redis.UniversalOptions
	// DescriptorCache is Distribution's Redis when its blob descriptor cache
	// is "redis": deletes evict their entries from it. Nil otherwise.
	DescriptorCache *redis.UniversalOptions
	// Prefix of every Redis key (default "reclaim:").
	Prefix string
	// Window is the protection window W (default 24h): GC deletes nothing
	// accessed within it, a queued blob is reviewed a window after it was
	// queued, and the tracker must have recorded for a window.
	Window time.Duration
	// AccessTTL is the lifetime of an access record (default 7 days, and at
	// least 4 windows).
	AccessTTL time.Duration
	// Dedup is how long a read access of one blob is not re-sent to Redis
	// by this process (default 1 s; at most a tenth of Window).
	Dedup time.Duration
	// FenceWait is how long a write waits for a fence to clear before it
	// fails with a retryable error (default 2 s); FencePoll how often it
	// looks again (default 100 ms).
	FenceWait time.Duration
	FencePoll time.Duration
	// Timeout bounds each registry-side Redis call (default 1 s).
	Timeout time.Duration
	// EpochInterval is how often the recording epoch is re-asserted
	// (default 5 s).
	EpochInterval time.Duration
	GC            GC
	Reclaimer     Reclaimer
	Retention     Retention
	HTTP          HTTP
	Budget        Budget
	Trash         Trash
}

// Trash is the `trash:` block: recoverable deletion (package trash).
type Trash struct {
	// Keep is how long what GC, the reclaimer and retention remove stays
	// restorable; 0 (the default) turns the trash off: deletions are final.
	Keep time.Duration
	// RestoreOnPull: a pull of something in the trash restores it and is
	// served instead of answering 404.
	RestoreOnPull bool
	// PurgeBatch is how many expired entries a reclaimer tick purges at
	// most (default 100).
	PurgeBatch int
}

// Budget is the `budget:` block: the storage requests GC (the collector,
// the reclaimer, retention apply, the sweep, the rebuild) may make, per
// process (storage/budget). Client requests never wait on it.
type Budget struct {
	// Rate is requests per second; 0: no limit. decode leaves it -1 when
	// the config sets none, for Load to pick by driver
	// (DefaultBudgetRate); a negative one left is taken as 0.
	Rate int
	// InFlight bounds GC's requests at once (default 32); 0: no bound.
	InFlight int
}

// HTTP is the `http:` block: the timeouts of the registry's HTTP server,
// which upstream's configuration does not have (upstream serves with none,
// so a client that sends a byte now and then holds a connection forever).
// There is no whole-request read timeout: a slow upload that keeps sending
// is never cut off, only one that stops.
type HTTP struct {
	// ReadHeaderTimeout bounds the reading of a request's headers (and a
	// TLS handshake) from its first byte (default 30 s).
	ReadHeaderTimeout time.Duration
	// BodyIdleTimeout is how long a request body may send nothing: each
	// read of the body must make progress within it (default 1 m).
	BodyIdleTimeout time.Duration
	// IdleTimeout is how long a kept-alive connection may wait for its
	// next request (default 2 m).
	IdleTimeout time.Duration
}

// DefaultHTTP is the `http:` block's defaults, also used without the
// reclaim middleware.
func DefaultHTTP() HTTP {
	return HTTP{ReadHeaderTimeout: 30 * time.Second, BodyIdleTimeout: time.Minute, IdleTimeout: 2 * time.Minute}
}

// Retention is the `retention:` block: the default retention policy and
// the limits of its runs (docs/api.md, "Retention").
type Retention struct {
	// KeepNewest (default 10) and RollbackSlack (default 3) are set to
	// their defaults by decode when absent, so that 0 can be configured.
	KeepNewest    int
	RollbackSlack int
	MinAge        time.Duration // retention age (default 8760h)
	Include       []string      // tag patterns (default: every tag)
	Exclude       []string
	Sources       []string      // in-use sources relied on (default: all)
	Cap           int           // candidates per plan (default 1000)
	InUseMaxAge   time.Duration // a source older aborts runs (default 24h)
	PlanMaxAge    time.Duration // apply refuses older plans (default 168h)
	PlanKeep      time.Duration // plans are kept this long (default 720h, at least 336h)
	Recheck       time.Duration // apply re-reads the whole index this often (default 1s)
	// PulledWithin keeps versions whose manifest was pulled within it
	// (default 0: pulls keep nothing).
	PulledWithin time.Duration
	// IgnorePullsFrom names the clients whose pulls do not count for
	// PulledWithin (they still record access for GC).
	IgnorePullsFrom IgnorePulls
}

// IgnorePulls is the `retention: ignorepullsfrom:` block: vulnerability
// scanners and mirrors pull everything, which would make "last pulled"
// meaningless.
type IgnorePulls struct {
	// UserAgents: a pull whose User-Agent contains one of these
	// (case-insensitive) does not count.
	UserAgents []string
	// Accounts: a pull by one of these authenticated accounts (the name
	// Distribution's access controller gave) does not count.
	Accounts []string
}

// GC is the `gc:` block: the GC API.
type GC struct {
	Enabled      bool
	Cap          int // max link deletions per run (default 10000)
	KeepUntagged bool
	// AllowUntaggedOverride lets a request's untagged=delete override
	// `untagged: keep` (default false: such a request is refused). A
	// request may always ask for the stricter keep.
	AllowUntaggedOverride bool
	// DryRuns bounds the dry runs walking at once on this instance
	// (default 4); identical ones at once share one walk. DryRunWait is
	// how long one more waits for a slot before it is refused (default
	// 5s; 0: refused at once).
	DryRuns    int
	DryRunWait time.Duration
}

// Reclaimer is the `reclaimer:` block: the background reclaimer.
type Reclaimer struct {
	Enabled  bool // the kill switch
	Interval time.Duration
	Batch    int
	Workers  int           // 0: gc's default
	Lease    time.Duration // 0: gc's default
	// UsageRefresh is how many repositories' usage estimates a tick
	// refreshes (decode's default 4; 0: none); UsageMaxAge the age past
	// which one is refreshed (default 1h).
	UsageRefresh int
	UsageMaxAge  time.Duration
	// ScrubRepos is how many repositories a tick scrubs: every forward
	// link checked for its reverse link, missing ones written back
	// (decode's default 2; 0: none).
	ScrubRepos int
}

// ErrBadOptions matches every invalid option (errors.Is).
var ErrBadOptions = errors.New("invalid reclaim middleware options")

// OptionError is one invalid option. Option is the key as written in
// config.yml, dotted for nested blocks ("redis.db", "gc.cap").
type OptionError struct {
	Option string
	Err    error
}

func (e *OptionError) Error() string {
	return fmt.Sprintf("config: middleware %s: option %q: %v", MiddlewareName, e.Option, e.Err)
}

// Unwrap lets errors.Is find ErrBadOptions and the cause.
func (e *OptionError) Unwrap() []error { return []error{ErrBadOptions, e.Err} }

// optionError names the option key of err, prefixing the name of a nested
// OptionError ("redis" + "db" = "redis.db").
func optionError(key string, err error) *OptionError {
	var inner *OptionError
	if errors.As(err, &inner) {
		return &OptionError{Option: key + "." + inner.Option, Err: inner.Err}
	}
	return &OptionError{Option: key, Err: err}
}

// WithDefaults fills every zero option with its default and checks the
// result. decode calls it; so does code that builds Options by hand.
func (o Options) WithDefaults() (Options, error) {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if o.Prefix == "" {
		o.Prefix = "reclaim:"
	}
	def(&o.Window, defaultWindow)
	def(&o.AccessTTL, max(7*24*time.Hour, 4*o.Window))
	def(&o.Dedup, time.Second)
	def(&o.FenceWait, 2*time.Second)
	def(&o.FencePoll, 100*time.Millisecond)
	def(&o.Timeout, time.Second)
	def(&o.EpochInterval, 5*time.Second)
	def(&o.Reclaimer.Interval, defaultReclaimerInterval)
	def(&o.Reclaimer.UsageMaxAge, defaultUsageMaxAge)
	if o.GC.Cap == 0 {
		o.GC.Cap = defaultCap
	}
	if o.GC.DryRuns == 0 {
		o.GC.DryRuns = defaultDryRuns
	}
	r := &o.Retention
	def(&r.MinAge, 365*24*time.Hour)
	def(&r.InUseMaxAge, 24*time.Hour)
	def(&r.PlanMaxAge, 7*24*time.Hour)
	def(&r.PlanKeep, 30*24*time.Hour)
	def(&r.Recheck, time.Second)
	if r.Cap == 0 {
		r.Cap = 1000
	}
	h, dh := &o.HTTP, DefaultHTTP()
	def(&h.ReadHeaderTimeout, dh.ReadHeaderTimeout)
	def(&h.BodyIdleTimeout, dh.BodyIdleTimeout)
	def(&h.IdleTimeout, dh.IdleTimeout)
	if o.Reclaimer.Batch == 0 {
		o.Reclaimer.Batch = defaultReclaimerBatch
	}
	if o.Trash.PurgeBatch == 0 {
		o.Trash.PurgeBatch = defaultReclaimerBatch
	}
	return o, o.check()
}

func (o Options) check() error {
	for _, c := range []struct {
		name   string
		d      time.Duration
		zeroOK bool
	}{
		{"window", o.Window, false}, {"accessttl", o.AccessTTL, false}, {"dedup", o.Dedup, true},
		{"fencewait", o.FenceWait, true}, {"fencepoll", o.FencePoll, false}, {"timeout", o.Timeout, false},
		{"epochinterval", o.EpochInterval, false},
	} {
		switch {
		case c.d < 0 && c.zeroOK:
			return &OptionError{Option: c.name, Err: fmt.Errorf("must not be negative, got %v", c.d)}
		case c.d <= 0 && !c.zeroOK:
			return &OptionError{Option: c.name, Err: fmt.Errorf("must be a positive duration, got %v", c.d)}
		}
	}
	switch {
	case o.Retention.PlanKeep < 14*24*time.Hour:
		return &OptionError{Option: "retention.plankeep", Err: fmt.Errorf("%v must be at least 336h (14 days)", o.Retention.PlanKeep)}
	case o.Retention.PlanMaxAge > o.Retention.PlanKeep:
		return &OptionError{Option: "retention.planmaxage", Err: fmt.Errorf("%v must not exceed retention.plankeep %v", o.Retention.PlanMaxAge, o.Retention.PlanKeep)}
	case o.AccessTTL < 2*o.Window:
		return &OptionError{Option: "accessttl", Err: fmt.Errorf("%v must be at least twice the window %v", o.AccessTTL, o.Window)}
	case o.Dedup*10 > o.Window:
		return &OptionError{Option: "dedup", Err: fmt.Errorf("%v must be at most a tenth of the window %v", o.Dedup, o.Window)}
	case o.Trash.RestoreOnPull && o.Trash.Keep == 0:
		return &OptionError{Option: "trash.restoreonpull", Err: errors.New("needs trash.keep: with the trash off nothing can be restored")}
	case o.Trash.Keep > 0 && o.Trash.Keep < o.Window:
		return &OptionError{Option: "trash.keep", Err: fmt.Errorf("%v must be at least the window %v (or 0: off)", o.Trash.Keep, o.Window)}
	}
	return nil
}
