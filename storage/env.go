package storage

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/distribution/distribution/v3/configuration"
	"github.com/distribution/distribution/v3/registry/handlers"
	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/distribution/distribution/v3/registry/storage/driver/factory"
	storagemiddleware "github.com/distribution/distribution/v3/registry/storage/driver/middleware"
	"github.com/reclaim-registry/reclaim/internal/rlog"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/linkdb"
	"github.com/reclaim-registry/reclaim/storage/tracker"
	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"
)

// MiddlewareName is the name to list under `middleware: storage:`.
const MiddlewareName = "reclaim"

func init() {
	if err := storagemiddleware.Register(MiddlewareName, initMiddleware); err != nil {
		logrus.Errorf("reclaim: register storage middleware: %v", err)
	}
}

// Env is one process's view of the link database: the wrapped driver, the
// driver below it, the tracker and the options. The middleware Distribution
// builds, the HTTP layer and GC in the same process share one Env (Open
// memoizes it per configuration), so they share one tracker and one dedup
// table.
type Env struct {
	// Driver is the storage driver with the reclaim middleware: delete
	// through it so reverse links and tombstones follow.
	Driver storagedriver.StorageDriver
	// Raw is the driver below the middleware.
	Raw storagedriver.StorageDriver
	// Tracker records accesses and takes fences.
	Tracker *tracker.Tracker
	// Links reads and writes reverse links (on Raw).
	Links *linkdb.ReverseLinks
	// Window is the configured protection window: GC must not delete what
	// was accessed more recently than this.
	Window time.Duration
	// Embedded is true when Redis is the in-process miniredis.
	Embedded bool

	opts  Options
	dedup *dedup
	// distCache is Distribution's Redis (when its blob descriptor cache is
	// "redis"), for Evict.
	distCache redis.UniversalClient
	mini      *miniredis.Miniredis
	bg        context.Context // lives until Close: deferred re-checks
	stop      context.CancelFunc
	closeOnce sync.Once
}

// Options are the middleware options (config.yml `middleware: storage:
// - name: reclaim, options: {...}`).
type Options struct {
	// Redis is where access records and fences live. Empty Addrs: use
	// Distribution's `redis:` section, else an embedded miniredis.
	Redis redis.UniversalOptions
	// Prefix of every Redis key (default "reclaim:").
	Prefix string
	// Window is the protection window (default 1h).
	Window time.Duration
	// AccessTTL is the lifetime of an access record (default 7 days, and at
	// least 4 windows).
	AccessTTL time.Duration
	// Dedup is how long a read access of one blob is not re-sent to Redis
	// by this process (default 1 s; must stay far below Window).
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
}

func (o *Options) defaults() error {
	if o.Prefix == "" {
		o.Prefix = "reclaim:"
	}
	if o.Window == 0 {
		o.Window = time.Hour
	}
	if o.AccessTTL == 0 {
		o.AccessTTL = max(7*24*time.Hour, 4*o.Window)
	}
	if o.Dedup == 0 {
		o.Dedup = time.Second
	}
	if o.FenceWait == 0 {
		o.FenceWait = 2 * time.Second
	}
	if o.FencePoll == 0 {
		o.FencePoll = 100 * time.Millisecond
	}
	if o.Timeout == 0 {
		o.Timeout = time.Second
	}
	if o.EpochInterval == 0 {
		o.EpochInterval = 5 * time.Second
	}
	for _, c := range []struct {
		name string
		d    time.Duration
		min  time.Duration // smallest allowed value
	}{
		{"window", o.Window, 1}, {"accessttl", o.AccessTTL, 1}, {"dedup", o.Dedup, 0},
		{"fencewait", o.FenceWait, 0}, {"fencepoll", o.FencePoll, 1}, {"timeout", o.Timeout, 1},
		{"epochinterval", o.EpochInterval, 1},
	} {
		switch {
		case c.min > 0 && c.d < c.min:
			return &OptionError{Option: c.name, Err: fmt.Errorf("must be a positive duration, got %v", c.d)}
		case c.d < c.min:
			return &OptionError{Option: c.name, Err: fmt.Errorf("must not be negative, got %v", c.d)}
		}
	}
	switch {
	case o.AccessTTL < 2*o.Window:
		return &OptionError{Option: "accessttl", Err: fmt.Errorf("%v must be at least twice the window %v", o.AccessTTL, o.Window)}
	case o.Dedup*10 > o.Window:
		return &OptionError{Option: "dedup", Err: fmt.Errorf("%v must be at most a tenth of the window %v", o.Dedup, o.Window)}
	}
	return nil
}

// ErrBadOptions is returned for invalid middleware options.
var ErrBadOptions = errors.New("storage: invalid reclaim middleware options")

// OptionError is one invalid middleware option. It matches ErrBadOptions
// (errors.Is). Option is the key as written in config.yml, dotted for nested
// blocks ("redis.db", "redis.tls.rootcas").
type OptionError struct {
	Option string
	Err    error
}

func (e *OptionError) Error() string {
	return fmt.Sprintf("%v: option %q: %v", ErrBadOptions, e.Option, e.Err)
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

var (
	envMu sync.Mutex
	envs  = map[*configuration.Configuration]*Env{}
	// current is the Env most recently opened; DescriptorServiceFactory,
	// which Distribution builds without any context, uses it.
	current *Env
)

// Current returns the process's Env, or nil when the reclaim middleware is
// not configured.
func Current() *Env {
	envMu.Lock()
	defer envMu.Unlock()
	return current
}

// Open returns the Env of config, creating it once per configuration: the
// middleware instance Distribution builds for `serve` and the HTTP handlers
// and GC that call Open with the same configuration share it. When nothing
// built the driver yet (a CLI command), Open creates it from config.storage.
// It fails when config does not list the reclaim middleware.
func Open(ctx context.Context, config *configuration.Configuration) (*Env, error) {
	return openEnv(ctx, config, nil)
}

func openEnv(ctx context.Context, config *configuration.Configuration, below storagedriver.StorageDriver) (*Env, error) {
	envMu.Lock()
	defer envMu.Unlock()
	if e, ok := envs[config]; ok {
		return e, nil
	}
	var raw map[string]any
	found := false
	for _, mw := range config.Middleware["storage"] {
		if mw.Name == MiddlewareName && !mw.Disabled {
			raw, found = mw.Options, true
		}
	}
	if !found {
		return nil, fmt.Errorf("storage: the %q storage middleware is not configured", MiddlewareName)
	}
	opts, err := ParseOptions(raw)
	if err != nil {
		return nil, err
	}
	if err := CheckProxyGC(config); err != nil {
		return nil, err
	}
	if below == nil {
		params := config.Storage.Parameters()
		if params == nil {
			params = configuration.Parameters{}
		}
		if below, err = factory.Create(ctx, config.Storage.Type(), params); err != nil {
			return nil, fmt.Errorf("storage: create %s driver: %w", config.Storage.Type(), err)
		}
	}
	e, err := NewEnv(ctx, below, opts, config)
	if err != nil {
		return nil, err
	}
	envs[config] = e
	current = e
	return e, nil
}

// initMiddleware is the InitFunc Distribution calls for `name: reclaim`.
// Distribution passes its *handlers.App as the context, which carries the
// configuration (for the `redis:` fallback and for memoization).
func initMiddleware(ctx context.Context, below storagedriver.StorageDriver, options map[string]any) (storagedriver.StorageDriver, error) {
	if app, ok := ctx.(*handlers.App); ok && app.Config != nil {
		e, err := openEnv(ctx, app.Config, below)
		if err != nil {
			return nil, err
		}
		if e.Raw == below {
			return e.Driver, nil
		}
		// Open ran first (a CLI command) with a driver of its own: wrap
		// Distribution's driver too, sharing the tracker.
		return Wrap(below, e), nil
	}
	opts, err := ParseOptions(options)
	if err != nil {
		return nil, err
	}
	e, err := NewEnv(ctx, below, opts, nil)
	if err != nil {
		return nil, err
	}
	envMu.Lock()
	current = e
	envMu.Unlock()
	return e.Driver, nil
}

// NewEnv builds an Env around below without memoizing it (tests, tools).
// config may be nil; it supplies the Redis fallback.
func NewEnv(ctx context.Context, below storagedriver.StorageDriver, opts Options, config *configuration.Configuration) (*Env, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	e := &Env{Raw: below, Window: opts.Window, opts: opts, dedup: &dedup{interval: opts.Dedup}}
	ropts := opts.Redis
	if len(ropts.Addrs) == 0 && config != nil && len(config.Redis.Options.Addrs) > 0 {
		var err error
		if ropts, err = DistributionRedis(config); err != nil {
			return nil, err
		}
	}
	if len(ropts.Addrs) == 0 {
		m := miniredis.NewMiniRedis()
		if err := m.Start(); err != nil {
			return nil, fmt.Errorf("storage: start embedded redis: %w", err)
		}
		e.mini, e.Embedded = m, true
		ropts.Addrs = []string{m.Addr()}
		rlog.From(ctx).Warnf("reclaim: no redis configured; using an embedded in-process redis at %s. "+
			"Access records start now and die with the process, so GC will not delete shared blobs until it has recorded for a full window (%v)", m.Addr(), opts.Window)
	}
	if ropts.ReadTimeout == 0 {
		ropts.ReadTimeout = opts.Timeout
	}
	if ropts.WriteTimeout == 0 {
		ropts.WriteTimeout = opts.Timeout
	}
	if ropts.DialTimeout == 0 {
		ropts.DialTimeout = opts.Timeout
	}
	ropts.ContextTimeoutEnabled = true
	client := redis.NewUniversalClient(&ropts)
	t, err := tracker.NewTracker(client, tracker.TrackerOptions{Prefix: opts.Prefix, AccessTTL: opts.AccessTTL, Timeout: opts.Timeout, Embedded: e.Embedded})
	if err != nil {
		client.Close()
		return nil, err
	}
	e.Tracker = t
	e.Links = linkdb.NewReverseLinks(below)
	e.Driver = Wrap(below, e)
	if config != nil && blobDescriptorCache(config) == "redis" && len(config.Redis.Options.Addrs) > 0 {
		dopts, err := DistributionRedis(config)
		if err != nil {
			client.Close()
			return nil, err
		}
		e.distCache = redis.NewUniversalClient(&dopts)
	}
	if marked, err := linkdb.MarkCompleteIfEmpty(ctx, below); err != nil {
		rlog.From(ctx).WithError(err).Warn("reclaim: could not check whether the storage is empty; GC deletes no blob until `registry linkdb rebuild` has run")
	} else if marked {
		rlog.From(ctx).Info("reclaim: storage holds no repository yet: link database marked complete")
	}
	if err := t.StartRecording(ctx); err != nil {
		rlog.From(ctx).WithError(err).Warn("reclaim: could not set the recording epoch; pushes will fail until redis answers")
	}
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	e.bg, e.stop = bg, cancel
	go t.KeepRecording(bg, opts.EpochInterval)
	return e, nil
}

// Close stops the epoch keeper and closes Redis clients (and the embedded
// Redis). It does not close the storage driver.
func (e *Env) Close() error {
	e.closeOnce.Do(func() {
		e.stop()
		e.Tracker.Client().Close()
		if e.distCache != nil {
			e.distCache.Close()
		}
		if e.mini != nil {
			e.mini.Close()
		}
		envMu.Lock()
		for k, v := range envs {
			if v == e {
				delete(envs, k)
			}
		}
		if current == e {
			current = nil
		}
		envMu.Unlock()
	})
	return nil
}

// Evict makes stale blob-descriptor cache entries of o stop answering: it
// leaves a tombstone the descriptor wrapper checks on every Stat (which then
// drops in-memory cache entries), and deletes Distribution's own Redis cache
// keys when its cache is "redis". The middleware calls it for every forward
// link or blob it sees deleted; GC deleting through Env.Driver needs nothing
// else.
func (e *Env) Evict(ctx context.Context, o layout.Object) error {
	e.dedup.forget(o)
	err := e.Tracker.MarkGone(ctx, o)
	if e.distCache != nil {
		keys := []string{"blobs::" + o.Blob.String()}
		if o.Repo != "" {
			keys = []string{"repository::" + o.Repo + "::blobs::" + o.Blob.String()}
			if cerr := e.distCache.SRem(ctx, "repository::"+o.Repo+"::blobs", o.Blob.String()).Err(); cerr != nil {
				err = errors.Join(err, fmt.Errorf("%w: %v", layout.ErrTrackerUnavailable, cerr))
			}
		}
		if cerr := e.distCache.Del(ctx, keys...).Err(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("%w: %v", layout.ErrTrackerUnavailable, cerr))
		}
	}
	return err
}

func (e *Env) clearGone(ctx context.Context, objs ...layout.Object) {
	if err := e.Tracker.ClearGone(ctx, objs...); err != nil {
		rlog.From(ctx).WithError(err).Debug("reclaim: could not clear a tombstone")
	}
}

// Options returns the effective options.
func (e *Env) Options() Options { return e.opts }

func blobDescriptorCache(config *configuration.Configuration) string {
	cc, ok := config.Storage["cache"]
	if !ok {
		return ""
	}
	v, ok := cc["blobdescriptor"]
	if !ok {
		v = cc["layerinfo"]
	}
	s, _ := v.(string)
	return s
}

// DistributionRedis is the client config of Distribution's own `redis:` section,
// TLS included; the middleware falls back to it.
func DistributionRedis(config *configuration.Configuration) (redis.UniversalOptions, error) {
	o := config.Redis.Options
	ro := redis.UniversalOptions{
		Addrs: o.Addrs, ClientName: o.ClientName, DB: o.DB, Protocol: o.Protocol,
		Username: o.Username, Password: o.Password,
		SentinelUsername: o.SentinelUsername, SentinelPassword: o.SentinelPassword,
		MaxRetries: o.MaxRetries, DialTimeout: o.DialTimeout, ReadTimeout: o.ReadTimeout, WriteTimeout: o.WriteTimeout,
		PoolSize: o.PoolSize, MinIdleConns: o.MinIdleConns, MaxIdleConns: o.MaxIdleConns,
		MasterName: o.MasterName,
	}
	if t := config.Redis.TLS; t.Certificate != "" || t.Key != "" || len(t.RootCAs) > 0 {
		c, err := tracker.TLSConfig(t.Certificate, t.Key, t.RootCAs)
		if err != nil {
			return ro, fmt.Errorf("storage: Distribution's redis section: %w", err)
		}
		ro.TLSConfig = c
	}
	return ro, nil
}

// ParseOptions reads the middleware options map from config.yml:
//
//	redis: {addrs: [host:port], username, password, db, mastername, clientname}
//	prefix: "reclaim:"
//	window: 1h
//	accessttl: 168h
//	dedup: 1s
//	fencewait: 2s
//	fencepoll: 100ms
//	timeout: 1s
//	epochinterval: 5s
//
// A bad option is an *OptionError naming it. Keys are checked in sorted
// order, so the same config always reports the same option first.
func ParseOptions(m map[string]any) (Options, error) {
	var o Options
	for _, k := range slices.Sorted(maps.Keys(m)) {
		v := m[k]
		var err error
		switch strings.ToLower(k) {
		case "redis":
			err = parseRedis(v, &o.Redis)
		case "prefix":
			o.Prefix, err = str(v)
		case "window":
			o.Window, err = dur(v)
		case "accessttl":
			o.AccessTTL, err = dur(v)
		case "dedup":
			o.Dedup, err = dur(v)
		case "fencewait":
			o.FenceWait, err = dur(v)
		case "fencepoll":
			o.FencePoll, err = dur(v)
		case "timeout":
			o.Timeout, err = dur(v)
		case "epochinterval":
			o.EpochInterval, err = dur(v)
		case "writegrace":
			// accepted for old configs and ignored: a link writer and a
			// concurrent delete no longer rely on a time bound (unlink)
			_, err = dur(v)
		case "gc", "reclaimer":
			// GC API and reclaimer settings; registry.ParseGCConfig and
			// registry.ParseReclaimerConfig read them.
		default:
			err = errors.New("unknown option")
		}
		if err != nil {
			return Options{}, optionError(k, err)
		}
	}
	if err := o.defaults(); err != nil {
		return Options{}, err
	}
	return o, nil
}

func parseRedis(v any, r *redis.UniversalOptions) error {
	m, ok := OptionMap(v)
	if !ok {
		return fmt.Errorf("must be a map, got %T", v)
	}
	for _, ks := range slices.Sorted(maps.Keys(m)) {
		x := m[ks]
		var err error
		switch strings.ToLower(ks) {
		case "addrs":
			switch a := x.(type) {
			case []any:
				for _, s := range a {
					as, serr := str(s)
					if serr != nil {
						return optionError(ks, fmt.Errorf("every address %v", serr))
					}
					r.Addrs = append(r.Addrs, as)
				}
			case []string:
				r.Addrs = append(r.Addrs, a...)
			default:
				err = fmt.Errorf("must be a list of host:port, got %T", x)
			}
		case "addr":
			var s string
			s, err = str(x)
			r.Addrs = append(r.Addrs, s)
		case "username":
			r.Username, err = str(x)
		case "password":
			r.Password, err = str(x)
		case "mastername":
			r.MasterName, err = str(x)
		case "clientname":
			r.ClientName, err = str(x)
		case "sentinelusername":
			r.SentinelUsername, err = str(x)
		case "sentinelpassword":
			r.SentinelPassword, err = str(x)
		case "tls":
			r.TLSConfig, err = parseRedisTLS(x)
		case "db":
			n, ok := x.(int)
			if !ok {
				err = fmt.Errorf("must be an integer, got %T", x)
			}
			r.DB = n
		default:
			err = errors.New("unknown option")
		}
		if err != nil {
			return optionError(ks, err)
		}
	}
	return nil
}

func str(v any) (string, error) {
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("must be a string, got %T", v)
	}
	return s, nil
}

func dur(v any) (time.Duration, error) {
	switch x := v.(type) {
	case string:
		d, err := time.ParseDuration(x)
		if err != nil {
			return 0, fmt.Errorf("must be a duration like 90s, 10m or 24h, got %q", x)
		}
		return d, nil
	case time.Duration:
		return x, nil
	}
	return 0, fmt.Errorf("must be a duration like 90s, 10m or 24h, got %v (%T)", v, v)
}
