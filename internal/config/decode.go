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
	"github.com/redis/go-redis/v9"
)

// decode reads the options map of the reclaim entry, fills the defaults
// and checks them. Keys are decoded in sorted order, so the same config
// always reports the same bad option first.
func decode(m map[string]any) (Options, error) {
	var o Options
	o.Retention.KeepNewest, o.Retention.RollbackSlack = 10, 3
	o.Reclaimer.UsageRefresh = defaultUsageRefresh // absent: the default; 0 can be configured
	o.Reclaimer.ScrubRepos = defaultScrubRepos     // likewise
	o.GC.DryRunWait = defaultDryRunWait            // likewise
	var writeGrace time.Duration
	err := decodeBlock(m, fields{
		"redis":         func(v any) error { return decodeRedis(v, &o.Redis) },
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
		"gc": block(fields{
			"enabled":  boolean(&o.GC.Enabled),
			"cap":      capValue(&o.GC.Cap),
			"untagged": untagged(&o.GC.KeepUntagged),
			// a request may loosen untagged: keep only when this says so
			"allowuntaggedoverride": boolean(&o.GC.AllowUntaggedOverride),
			"dryruns":               positiveInt(&o.GC.DryRuns),
			"dryrunwait":            nonNegativeDuration(&o.GC.DryRunWait),
		}),
		"retention": block(fields{
			"keepnewest":    nonNegativeInt(&o.Retention.KeepNewest),
			"rollbackslack": nonNegativeInt(&o.Retention.RollbackSlack),
			"minage":        positiveDuration(&o.Retention.MinAge),
			"include":       strs(&o.Retention.Include),
			"exclude":       strs(&o.Retention.Exclude),
			"sources":       strs(&o.Retention.Sources),
			"cap":           positiveInt(&o.Retention.Cap),
			"inusemaxage":   positiveDuration(&o.Retention.InUseMaxAge),
			"planmaxage":    positiveDuration(&o.Retention.PlanMaxAge),
			"plankeep":      positiveDuration(&o.Retention.PlanKeep),
			"recheck":       positiveDuration(&o.Retention.Recheck),
		}),
		"http": block(fields{
			"readheadertimeout": positiveDuration(&o.HTTP.ReadHeaderTimeout),
			"bodyidletimeout":   positiveDuration(&o.HTTP.BodyIdleTimeout),
			"idletimeout":       positiveDuration(&o.HTTP.IdleTimeout),
		}),
		"reclaimer": block(fields{
			"enabled":      boolean(&o.Reclaimer.Enabled),
			"interval":     positiveDuration(&o.Reclaimer.Interval),
			"lease":        positiveDuration(&o.Reclaimer.Lease),
			"batch":        positiveInt(&o.Reclaimer.Batch),
			"workers":      positiveInt(&o.Reclaimer.Workers),
			"usagerefresh": nonNegativeInt(&o.Reclaimer.UsageRefresh),
			"usagemaxage":  positiveDuration(&o.Reclaimer.UsageMaxAge),
			"scrubrepos":   nonNegativeInt(&o.Reclaimer.ScrubRepos),
		}),
	})
	if err != nil {
		return Options{}, err
	}
	return o.WithDefaults()
}

// fields is one option block: the setter of each key, in lower case.
type fields map[string]func(v any) error

// decodeBlock hands each key of the map v to its setter. A nil block (a
// key with nothing under it in YAML) is empty.
func decodeBlock(v any, f fields) error {
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
		set, ok := f[lower]
		if !ok {
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

func block(f fields) func(any) error {
	return func(v any) error { return decodeBlock(v, f) }
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

func positiveDuration(dst *time.Duration) func(any) error {
	return func(v any) error {
		d, err := asDuration(v)
		if err != nil || d <= 0 {
			return fmt.Errorf("must be a positive duration like 1m, got %v", v)
		}
		*dst = d
		return nil
	}
}

func nonNegativeDuration(dst *time.Duration) func(any) error {
	return func(v any) error {
		d, err := asDuration(v)
		if err != nil || d < 0 {
			return fmt.Errorf("must be a duration like 5s, 0s or more, got %v", v)
		}
		*dst = d
		return nil
	}
}

func boolean(dst *bool) func(any) error {
	return func(v any) error {
		b, ok := v.(bool)
		if !ok {
			return fmt.Errorf("must be true or false, got %v", v)
		}
		*dst = b
		return nil
	}
}

func positiveInt(dst *int) func(any) error {
	return func(v any) error {
		n, ok := v.(int)
		if !ok || n <= 0 {
			return fmt.Errorf("must be a positive integer, got %v", v)
		}
		*dst = n
		return nil
	}
}

func nonNegativeInt(dst *int) func(any) error {
	return func(v any) error {
		n, ok := v.(int)
		if !ok || n < 0 {
			return fmt.Errorf("must be a non-negative integer, got %v", v)
		}
		*dst = n
		return nil
	}
}

func strs(dst *[]string) func(any) error {
	return func(v any) (err error) {
		*dst, err = asStrings(v)
		return err
	}
}

// capValue: 0 keeps the default.
func capValue(dst *int) func(any) error {
	return func(v any) error {
		n, ok := v.(int)
		if !ok || n < 0 {
			return fmt.Errorf("must be a non-negative integer (0 = default), got %v", v)
		}
		*dst = n
		return nil
	}
}

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

func decodeRedis(v any, r *redis.UniversalOptions) error {
	return decodeBlock(v, fields{
		"addrs": func(v any) error {
			a, err := asStrings(v)
			r.Addrs = append(r.Addrs, a...)
			return err
		},
		"addr": func(v any) error {
			s, err := asString(v)
			r.Addrs = append(r.Addrs, s)
			return err
		},
		"username":         str(&r.Username),
		"password":         str(&r.Password),
		"mastername":       str(&r.MasterName),
		"clientname":       str(&r.ClientName),
		"sentinelusername": str(&r.SentinelUsername),
		"sentinelpassword": str(&r.SentinelPassword),
		"tls":              func(v any) (err error) { r.TLSConfig, err = decodeTLS(v); return err },
		"db": func(v any) error {
			n, ok := v.(int)
			if !ok {
				return fmt.Errorf("must be an integer, got %T", v)
			}
			r.DB = n
			return nil
		},
	})
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
		"rootcas": func(v any) (err error) {
			cas, err = asStrings(v)
			return err
		},
	})
	if err != nil || (!enabled && cert == "" && key == "" && len(cas) == 0) {
		return nil, err
	}
	return redisTLS(cert, key, cas)
}
