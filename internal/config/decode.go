package config

import (
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/distribution/distribution/v3/configuration"
)

// decode reads the options map of the reclaim entry, fills the defaults
// and checks them. Keys are decoded in sorted order, so the same config
// always reports the same bad option first.
func decode(m map[string]any) (Options, error) {
	o := presets()
	var writeGrace time.Duration
	err := decodeBlock(m, fields{
		"prefix":        str(&o.Prefix),
		"window":        window(&o.Window),
		"accessttl":     duration(&o.AccessTTL),
		"dedup":         duration(&o.Dedup),
		"fencewait":     duration(&o.FenceWait),
		"fencepoll":     duration(&o.FencePoll),
		"timeout":       duration(&o.Timeout),
		"epochinterval": duration(&o.EpochInterval),
		// accepted for old configs and ignored: a link writer and a
		// concurrent delete do not rely on a time bound (unlink)
		"writegrace": duration(&writeGrace),

		"redis.addrs":            appendAddrs(&o.Redis.Addrs, asStrings),
		"redis.addr":             appendAddrs(&o.Redis.Addrs, asOneString),
		"redis.username":         str(&o.Redis.Username),
		"redis.password":         str(&o.Redis.Password),
		"redis.mastername":       str(&o.Redis.MasterName),
		"redis.clientname":       str(&o.Redis.ClientName),
		"redis.sentinelusername": str(&o.Redis.SentinelUsername),
		"redis.sentinelpassword": str(&o.Redis.SentinelPassword),
		"redis.tls":              func(v any) (err error) { o.Redis.TLSConfig, err = decodeTLS(v); return err },
		"redis.db":               redisDB(&o.Redis.DB),

		"gc.enabled":  boolean(&o.GC.Enabled),
		"gc.cap":      capValue(&o.GC.Cap),
		"gc.untagged": untagged(&o.GC.KeepUntagged),
		// a request may loosen untagged: keep only when this says so
		"gc.allowuntaggedoverride": boolean(&o.GC.AllowUntaggedOverride),
		"gc.dryruns":               positiveInt(&o.GC.DryRuns),
		"gc.dryrunwait":            nonNegativeDuration(&o.GC.DryRunWait),

		"retention.keepnewest":    nonNegativeInt(&o.Retention.KeepNewest),
		"retention.rollbackslack": nonNegativeInt(&o.Retention.RollbackSlack),
		"retention.minage":        positiveDuration(&o.Retention.MinAge),
		"retention.include":       strs(&o.Retention.Include),
		"retention.exclude":       strs(&o.Retention.Exclude),
		"retention.sources":       strs(&o.Retention.Sources),
		"retention.cap":           positiveInt(&o.Retention.Cap),
		"retention.inusemaxage":   positiveDuration(&o.Retention.InUseMaxAge),
		"retention.planmaxage":    positiveDuration(&o.Retention.PlanMaxAge),
		"retention.plankeep":      positiveDuration(&o.Retention.PlanKeep),
		"retention.recheck":       positiveDuration(&o.Retention.Recheck),
		"retention.pulledwithin":  positiveDuration(&o.Retention.PulledWithin),
		// clients whose pulls do not count for pulledwithin
		"retention.ignorepullsfrom.useragents": nonEmptyStrs(&o.Retention.IgnorePullsFrom.UserAgents),
		"retention.ignorepullsfrom.accounts":   nonEmptyStrs(&o.Retention.IgnorePullsFrom.Accounts),

		"http.readheadertimeout": positiveDuration(&o.HTTP.ReadHeaderTimeout),
		"http.bodyidletimeout":   positiveDuration(&o.HTTP.BodyIdleTimeout),
		"http.idletimeout":       positiveDuration(&o.HTTP.IdleTimeout),

		"budget.rate":     nonNegativeInt(&o.Budget.Rate),
		"budget.inflight": nonNegativeInt(&o.Budget.InFlight),

		"reclaimer.enabled":      boolean(&o.Reclaimer.Enabled),
		"reclaimer.interval":     positiveDuration(&o.Reclaimer.Interval),
		"reclaimer.lease":        positiveDuration(&o.Reclaimer.Lease),
		"reclaimer.batch":        positiveInt(&o.Reclaimer.Batch),
		"reclaimer.workers":      positiveInt(&o.Reclaimer.Workers),
		"reclaimer.usagerefresh": nonNegativeInt(&o.Reclaimer.UsageRefresh),
		"reclaimer.usagemaxage":  positiveDuration(&o.Reclaimer.UsageMaxAge),
		"reclaimer.scrubrepos":   nonNegativeInt(&o.Reclaimer.ScrubRepos),

		"trash.keep":          nonNegativeDuration(&o.Trash.Keep),
		"trash.restoreonpull": boolean(&o.Trash.RestoreOnPull),
		"trash.purgebatch":    positiveInt(&o.Trash.PurgeBatch),
	}, "")
	if err != nil {
		return Options{}, err
	}
	return o.WithDefaults()
}

// presets are the defaults of the options where 0 can be configured, so
// WithDefaults cannot tell "absent" from 0: set before decoding.
func presets() Options {
	var o Options
	o.Retention.KeepNewest, o.Retention.RollbackSlack = 10, 3
	o.Reclaimer.UsageRefresh = defaultUsageRefresh
	o.Reclaimer.ScrubRepos = defaultScrubRepos
	o.GC.DryRunWait = defaultDryRunWait
	o.Budget = Budget{Rate: -1, InFlight: defaultBudgetInFlight}
	return o
}

// fields is a table of options: the setter of each key, in lower case, a
// key inside a block under its dotted name ("gc.cap"), as the docs name it.
type fields map[string]func(v any) error

// decodeBlock hands each key of the map v to its setter in f, the keys
// looked up under path ("" at the top, "gc." inside gc). A key some
// option's name continues ("gc" of "gc.cap") opens a block. A nil block (a
// key with nothing under it in YAML) is empty.
func decodeBlock(v any, f fields, path string) error {
	if v == nil {
		return nil
	}
	m, ok := optionMap(v)
	if !ok {
		return fmt.Errorf("must be a map, got %T", v)
	}
	seen := map[string]string{}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		lower := strings.ToLower(k)
		set, ok := f.setter(path + lower)
		if !ok || strings.Contains(lower, ".") {
			return optionError(k, errors.New("unknown option"))
		}
		if prev, dup := seen[lower]; dup {
			return optionError(k, fmt.Errorf("given twice (also as %q)", prev))
		}
		seen[lower] = k
		if err := set(m[k]); err != nil {
			return optionError(k, err)
		}
	}
	return nil
}

// setter is the setter of the option name, or the decoder of the block it
// opens.
func (f fields) setter(name string) (func(any) error, bool) {
	if set, ok := f[name]; ok {
		return set, true
	}
	for k := range f {
		if strings.HasPrefix(k, name+".") {
			return func(v any) error { return decodeBlock(v, f, name+".") }, true
		}
	}
	return nil, false
}

// optionMap accepts the map shapes YAML decoders and Distribution's
// configuration produce for an option block.
func optionMap(v any) (map[string]any, bool) {
	switch m := v.(type) {
	case map[string]any:
		return m, true
	case configuration.Parameters:
		return m, true
	case map[any]any:
		out := make(map[string]any, len(m))
		for k, x := range m {
			ks, ok := k.(string)
			if !ok {
				return nil, false
			}
			out[ks] = x
		}
		return out, true
	}
	return nil, false
}

func asString(v any) (string, error) {
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("must be a string, got %T", v)
	}
	return s, nil
}

func asStrings(v any) ([]string, error) {
	switch a := v.(type) {
	case []string:
		return a, nil
	case []any:
		out := make([]string, 0, len(a))
		for _, x := range a {
			s, err := asString(x)
			if err != nil {
				return nil, fmt.Errorf("every entry %v", err)
			}
			out = append(out, s)
		}
		return out, nil
	}
	return nil, fmt.Errorf("must be a list, got %T", v)
}

func asDuration(v any) (time.Duration, error) {
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

func str(dst *string) func(any) error {
	return func(v any) (err error) {
		*dst, err = asString(v)
		return err
	}
}

func duration(dst *time.Duration) func(any) error {
	return func(v any) (err error) {
		*dst, err = asDuration(v)
		return err
	}
}

// window: 0 is refused, not taken as the default. A window of 0 would
// protect nothing; the default (24h) is for leaving the key out.
func window(dst *time.Duration) func(any) error {
	return func(v any) error {
		d, err := asDuration(v)
		if err != nil {
			return err
		}
		if d <= 0 {
			return fmt.Errorf("must be a positive duration, got %v (leave window out for the default %v)", d, defaultWindow)
		}
		*dst = d
		return nil
	}
}

func strs(dst *[]string) func(any) error {
	return func(v any) (err error) {
		*dst, err = asStrings(v)
		return err
	}
}

// nonEmptyStrs: a list without empty strings (an empty user agent
// pattern would match every client).
func nonEmptyStrs(dst *[]string) func(any) error {
	return func(v any) error {
		list, err := asStrings(v)
		if err != nil {
			return err
		}
		if slices.Contains(list, "") {
			return errors.New("must not hold an empty string")
		}
		*dst = list
		return nil
	}
}

// checked is the setter of an option whose value parse reads and ok
// accepts (nil: any); anything else must be want.
func checked[T any](dst *T, parse func(any) (T, bool), ok func(T) bool, want string) func(any) error {
	return func(v any) error {
		x, parsed := parse(v)
		if !parsed || (ok != nil && !ok(x)) {
			return fmt.Errorf("must be %s, got %v", want, v)
		}
		*dst = x
		return nil
	}
}

func positiveDuration(dst *time.Duration) func(any) error {
	return checked(dst, isDuration, positive, "a positive duration like 1m")
}

func nonNegativeDuration(dst *time.Duration) func(any) error {
	return checked(dst, isDuration, nonNegative, "a duration like 5s, 0s or more")
}

func positiveInt(dst *int) func(any) error {
	return checked(dst, typed[int], positive, "a positive integer")
}

func nonNegativeInt(dst *int) func(any) error {
	return checked(dst, typed[int], nonNegative, "a non-negative integer")
}

// capValue: 0 keeps the default.
func capValue(dst *int) func(any) error {
	return checked(dst, typed[int], nonNegative, "a non-negative integer (0 = default)")
}

func boolean(dst *bool) func(any) error {
	return checked(dst, typed[bool], nil, "true or false")
}

func typed[T any](v any) (T, bool) {
	x, ok := v.(T)
	return x, ok
}

func isDuration(v any) (time.Duration, bool) {
	d, err := asDuration(v)
	return d, err == nil
}

func positive[T int | time.Duration](x T) bool    { return x > 0 }
func nonNegative[T int | time.Duration](x T) bool { return x >= 0 }

func untagged(keep *bool) func(any) error {
	return func(v any) error {
		switch v {
		case "delete":
			*keep = false
		case "keep":
			*keep = true
		default:
			return fmt.Errorf("must be delete or keep, got %v", v)
		}
		return nil
	}
}

// appendAddrs: addr and addrs both add to the list of servers.
func appendAddrs(dst *[]string, parse func(any) ([]string, error)) func(any) error {
	return func(v any) error {
		a, err := parse(v)
		*dst = append(*dst, a...)
		return err
	}
}

// asOneString is asString for appendAddrs.
func asOneString(v any) ([]string, error) {
	s, err := asString(v)
	return []string{s}, err
}

func redisDB(dst *int) func(any) error {
	return func(v any) error {
		n, ok := v.(int)
		if !ok {
			return fmt.Errorf("must be an integer, got %T", v)
		}
		*dst = n
		return nil
	}
}

// decodeTLS reads the `redis: tls:` block:
//
//	tls:
//	  enabled: true          # TLS with the system roots, no client certificate
//	  certificate: /path     # client certificate (mTLS), with key
//	  key: /path
//	  rootcas: [/path, ...]  # extra root CAs
//
// Any of certificate, key or rootcas implies enabled.
func decodeTLS(v any) (*tls.Config, error) {
	var (
		enabled   bool
		cert, key string
		cas       []string
	)
	err := decodeBlock(v, fields{
		"enabled":     boolean(&enabled),
		"certificate": str(&cert),
		"key":         str(&key),
		"rootcas":     strs(&cas),
	}, "")
	if err != nil || (!enabled && cert == "" && key == "" && len(cas) == 0) {
		return nil, err
	}
	return redisTLS(cert, key, cas)
}
