package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/redis/go-redis/v9"

	"github.com/reclaim-registry/reclaim/storage/storagetest/redistest"
)

func withEntries(entries ...configuration.Middleware) *configuration.Configuration {
	return &configuration.Configuration{Middleware: map[string][]configuration.Middleware{"storage": entries}}
}

func TestLoadFindsTheEntry(t *testing.T) {
	reclaim := configuration.Middleware{Name: MiddlewareName, Options: configuration.Parameters{"window": "2m"}}
	disabled := reclaim
	disabled.Disabled = true
	for _, tc := range []struct {
		name    string
		conf    *configuration.Configuration
		on      bool
		wantErr string
	}{
		{"nil", nil, false, ""},
		{"none", &configuration.Configuration{}, false, ""},
		{"other middleware", withEntries(configuration.Middleware{Name: "redirect"}), false, ""},
		{"disabled", withEntries(disabled), false, ""},
		{"enabled", withEntries(configuration.Middleware{Name: "redirect"}, reclaim), true, ""},
		{"twice", withEntries(reclaim, disabled), true, "listed 2 times"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, on, err := Load(tc.conf)
			if on != tc.on || Enabled(tc.conf) != tc.on {
				t.Fatalf("on = %v, Enabled = %v, want %v", on, Enabled(tc.conf), tc.on)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if on && o.Window.String() != "2m0s" {
				t.Fatalf("window %v", o.Window)
			}
		})
	}
}

// Without a redis block the middleware uses Distribution's `redis:`
// section, and evicts from it when it is the blob descriptor cache.
func TestLoadFallsBackToDistributionRedis(t *testing.T) {
	conf := withEntries(configuration.Middleware{Name: MiddlewareName})
	conf.Redis.Options.Addrs = []string{"dist:6379"}
	o, _, err := Load(conf)
	if err != nil || len(o.Redis.Addrs) != 1 || o.Redis.Addrs[0] != "dist:6379" || o.DescriptorCache != nil {
		t.Fatalf("fallback: %+v %v", o.Redis, err)
	}
	conf.Storage = configuration.Storage{"cache": configuration.Parameters{"blobdescriptor": "redis"}}
	conf.Middleware["storage"][0].Options = configuration.Parameters{"redis": map[string]any{"addrs": []any{"own:6379"}}}
	o, _, err = Load(conf)
	if err != nil || o.Redis.Addrs[0] != "own:6379" || o.DescriptorCache == nil || o.DescriptorCache.Addrs[0] != "dist:6379" {
		t.Fatalf("own redis, descriptor cache: %+v %+v %v", o.Redis, o.DescriptorCache, err)
	}
}

// Falling back to Distribution's `redis:` section keeps its TLS settings:
// dropping them would talk plaintext to a Redis configured for TLS.
func TestLoadKeepsDistributionRedisTLS(t *testing.T) {
	cert, key := redistest.WriteCA(t)
	conf := withEntries(configuration.Middleware{Name: MiddlewareName})
	conf.Redis.Options.Addrs = []string{"redis.internal:6380"}
	conf.Redis.TLS.Certificate, conf.Redis.TLS.Key, conf.Redis.TLS.RootCAs = cert, key, []string{cert}
	o, _, err := Load(conf)
	if err != nil {
		t.Fatal(err)
	}
	if tc := o.Redis.TLSConfig; tc == nil || len(tc.Certificates) != 1 || tc.RootCAs == nil {
		t.Fatalf("TLS settings lost: %+v", tc)
	}
	conf.Redis.TLS.Key = ""
	if _, _, err := Load(conf); err == nil {
		t.Fatal("a certificate without its key was accepted")
	}
}

func TestRedisTLSOptions(t *testing.T) {
	cert, key := redistest.WriteCA(t)
	notPEM := filepath.Join(t.TempDir(), "empty.pem")
	if err := os.WriteFile(notPEM, []byte("nothing here"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		tls     map[any]any
		wantTLS bool
		wantErr bool
	}{
		{"enabled with system roots", map[any]any{"enabled": true}, true, false},
		{"disabled", map[any]any{"enabled": false}, false, false},
		{"mTLS and CA", map[any]any{"certificate": cert, "key": key, "rootcas": []any{cert}}, true, false},
		{"certificate without key", map[any]any{"certificate": cert}, false, true},
		{"missing CA file", map[any]any{"rootcas": []any{"/nonexistent/ca.pem"}}, false, true},
		{"CA file without a certificate", map[any]any{"rootcas": []any{notPEM}}, false, true},
		{"unknown key", map[any]any{"insecure": true}, false, true},
		{"enabled not a bool", map[any]any{"enabled": "yes"}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := decode(map[string]any{"redis": map[any]any{"addrs": []any{"127.0.0.1:6379"}, "tls": tc.tls}})
			if (err != nil) != tc.wantErr {
				t.Fatalf("Decode error = %v, want error %v", err, tc.wantErr)
			}
			if err == nil && (o.Redis.TLSConfig != nil) != tc.wantTLS {
				t.Fatalf("TLS config %v, want TLS %v", o.Redis.TLSConfig, tc.wantTLS)
			}
		})
	}
}

// A pull-through cache stores manifests without verifying them: GC or the
// reclaimer enabled there is refused, in one line.
func TestLoadRefusesGCOnAProxy(t *testing.T) {
	for _, tc := range []struct {
		block   string
		refused bool
	}{{"gc", true}, {"reclaimer", true}, {"", false}} {
		opts := configuration.Parameters{}
		if tc.block != "" {
			opts[tc.block] = map[string]any{"enabled": true}
		}
		conf := withEntries(configuration.Middleware{Name: MiddlewareName, Options: opts})
		conf.Proxy.RemoteURL = "http://127.0.0.1:1"
		_, _, err := Load(conf)
		if errors.Is(err, ErrProxyGC) != tc.refused || (err != nil && strings.Contains(err.Error(), "\n")) {
			t.Fatalf("%q on a proxy: %v, want refused=%v in one line", tc.block, err, tc.refused)
		}
	}
}

func TestOpenRedisTimeouts(t *testing.T) {
	o, err := decode(map[string]any{"timeout": "250ms", "redis": map[string]any{"addrs": []any{"127.0.0.1:1"}}})
	if err != nil {
		t.Fatal(err)
	}
	c := o.OpenRedis()
	defer c.Close()
	ro := c.(*redis.Client).Options()
	if ro.DialTimeout != 250*time.Millisecond || ro.ReadTimeout != 250*time.Millisecond || ro.WriteTimeout != 250*time.Millisecond || !ro.ContextTimeoutEnabled {
		t.Fatalf("timeouts: dial %v read %v write %v context %v", ro.DialTimeout, ro.ReadTimeout, ro.WriteTimeout, ro.ContextTimeoutEnabled)
	}
	if o.OpenDescriptorCache() != nil {
		t.Fatal("a descriptor cache client without a descriptor cache")
	}
}

// Distribution's redis blob descriptor cache cannot delete on a Redis
// Cluster (CROSSSLOT): refused at start, not as a 500 on every DELETE.
func TestLoadRefusesDescriptorCacheOnCluster(t *testing.T) {
	for _, tc := range []struct {
		addrs   []string
		master  string
		refused bool
	}{
		{[]string{"c1:6379", "c2:6379", "c3:6379"}, "", true},
		{[]string{"s1:26379", "s2:26379"}, "registry", false},
		{[]string{"redis:6379"}, "", false},
	} {
		conf := withEntries(configuration.Middleware{Name: MiddlewareName, Options: configuration.Parameters{}})
		conf.Storage = configuration.Storage{"inmemory": configuration.Parameters{}, "cache": configuration.Parameters{"blobdescriptor": "redis"}}
		conf.Redis.Options.Addrs, conf.Redis.Options.MasterName = tc.addrs, tc.master
		_, _, err := Load(conf)
		if errors.Is(err, ErrClusterDescriptorCache) != tc.refused || (!tc.refused && err != nil) {
			t.Fatalf("cache on %v (master %q): %v, want refused=%v", tc.addrs, tc.master, err, tc.refused)
		}
	}
}

// A config that sets no budget rate gets its driver's default.
func TestLoadPicksTheBudgetRateByDriver(t *testing.T) {
	for driver, want := range map[string]int{"filesystem": 0, "s3": defaultBudgetRate} {
		conf := withEntries(configuration.Middleware{Name: MiddlewareName})
		conf.Storage = configuration.Storage{driver: configuration.Parameters{}}
		o, _, err := Load(conf)
		if err != nil || o.Budget.Rate != want || o.Budget.InFlight != defaultBudgetInFlight {
			t.Fatalf("%s: budget %+v, %v; want rate %d", driver, o.Budget, err, want)
		}
		conf.Middleware["storage"][0].Options = configuration.Parameters{"budget": map[string]any{"rate": 7}}
		if o, _, err = Load(conf); err != nil || o.Budget.Rate != 7 {
			t.Fatalf("%s: configured rate 7: %+v, %v", driver, o.Budget, err)
		}
	}
}
