package config

import (
	"errors"
	"fmt"
	"time"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/redis/go-redis/v9"
)

// ErrProxyGC: GC is enabled on a pull-through cache. Distribution stores a
// proxied manifest without verifying its references (the content arrives
// lazily from the remote), so they are never fence-checked and GC could
// delete what a cached manifest is about to need.
var ErrProxyGC = errors.New("garbage collection is not supported on a pull-through cache (proxy.remoteurl is set)")

// ErrClusterDescriptorCache: Distribution's redis blob descriptor cache is
// on a Redis Cluster. Its Clear (every blob or manifest DELETE) runs one
// MULTI over keys of different hash slots ("repository::<r>::blobs",
// "blobs::<digest>", ...), which a cluster refuses (CROSSSLOT): every
// DELETE would fail with 500.
var ErrClusterDescriptorCache = errors.New("distribution's redis blob descriptor cache does not work on a Redis Cluster (its deletes touch keys of several hash slots in one transaction)")

// Enabled reports whether conf lists the reclaim middleware without
// `disabled: true`.
func Enabled(conf *configuration.Configuration) bool {
	if conf == nil {
		return false
	}
	for _, m := range conf.Middleware["storage"] {
		if m.Name == MiddlewareName && !m.Disabled {
			return true
		}
	}
	return false
}

// Load decodes the reclaim entry of conf. on is false when conf does not
// enable the middleware (Options is then zero). Load also resolves what
// comes from the rest of conf: the fallback to Distribution's `redis:`
// section, its blob descriptor cache, and the refusal of GC on a
// pull-through cache.
func Load(conf *configuration.Configuration) (o Options, on bool, err error) {
	if !Enabled(conf) {
		return Options{}, false, nil
	}
	var entries []configuration.Middleware
	for _, m := range conf.Middleware["storage"] {
		if m.Name == MiddlewareName {
			entries = append(entries, m)
		}
	}
	if len(entries) > 1 {
		// Distribution would stack every entry, disabled or not.
		return Options{}, true, fmt.Errorf("config: middleware %s: listed %d times under middleware: storage; list it once", MiddlewareName, len(entries))
	}
	if o, err = decode(entries[0].Options); err != nil {
		return Options{}, true, err
	}
	if o.Budget.Rate < 0 {
		o.Budget.Rate = DefaultBudgetRate(conf.Storage.Type())
	}
	fallback, cache := len(o.Redis.Addrs) == 0, blobDescriptorCache(conf) == "redis"
	if len(conf.Redis.Options.Addrs) > 0 && (fallback || cache) {
		dist, err := distributionRedis(conf)
		if err != nil {
			return Options{}, true, err
		}
		if fallback {
			o.Redis = dist
		}
		if cache && len(dist.Addrs) > 1 && dist.MasterName == "" {
			return Options{}, true, fmt.Errorf("config: %w: use storage: cache: blobdescriptor: inmemory, or a standalone or Sentinel redis in the redis: section "+
				"(the reclaim middleware's own redis: may be the cluster)", ErrClusterDescriptorCache)
		}
		if cache {
			o.DescriptorCache = &dist
		}
	}
	if conf.Proxy.RemoteURL != "" {
		for _, b := range []struct {
			name string
			on   bool
		}{{"gc", o.GC.Enabled}, {"reclaimer", o.Reclaimer.Enabled}} {
			if b.on {
				return Options{}, true, fmt.Errorf("config: %w: set %s.enabled to false in the reclaim middleware options, or remove proxy.remoteurl", ErrProxyGC, b.name)
			}
		}
	}
	return o, true, nil
}

// OpenRedis returns a client of o.Redis. Dial, read and write timeouts
// left unset are o.Timeout, and each call also ends with its context. The
// caller closes it.
func (o Options) OpenRedis() redis.UniversalClient {
	ro := o.Redis
	for _, t := range []*time.Duration{&ro.DialTimeout, &ro.ReadTimeout, &ro.WriteTimeout} {
		if *t == 0 {
			*t = o.Timeout
		}
	}
	ro.ContextTimeoutEnabled = true
	return redis.NewUniversalClient(&ro)
}

// OpenDescriptorCache returns a client of Distribution's blob descriptor
// cache Redis, with Distribution's own settings; nil when there is none.
func (o Options) OpenDescriptorCache() redis.UniversalClient {
	if o.DescriptorCache == nil {
		return nil
	}
	ro := *o.DescriptorCache
	return redis.NewUniversalClient(&ro)
}

// distributionRedis is the client config of Distribution's own `redis:`
// section, TLS included.
func distributionRedis(conf *configuration.Configuration) (redis.UniversalOptions, error) {
	c := conf.Redis.Options
	ro := redis.UniversalOptions{
		Addrs: c.Addrs, ClientName: c.ClientName, DB: c.DB, Protocol: c.Protocol,
		Username: c.Username, Password: c.Password,
		SentinelUsername: c.SentinelUsername, SentinelPassword: c.SentinelPassword,
		MaxRetries: c.MaxRetries, DialTimeout: c.DialTimeout, ReadTimeout: c.ReadTimeout, WriteTimeout: c.WriteTimeout,
		PoolSize: c.PoolSize, MinIdleConns: c.MinIdleConns, MaxIdleConns: c.MaxIdleConns,
		MasterName: c.MasterName,
	}
	if t := conf.Redis.TLS; t.Certificate != "" || t.Key != "" || len(t.RootCAs) > 0 {
		tc, err := redisTLS(t.Certificate, t.Key, t.RootCAs)
		if err != nil {
			return ro, fmt.Errorf("config: redis: %w", err)
		}
		ro.TLSConfig = tc
	}
	return ro, nil
}

func blobDescriptorCache(conf *configuration.Configuration) string {
	cc, ok := conf.Storage["cache"]
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
