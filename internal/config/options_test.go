package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestDecode(t *testing.T) {
	o, err := decode(map[string]any{
		"redis":     map[any]any{"addrs": []any{"a:1", "b:2"}, "password": "p", "db": 3, "mastername": "m"},
		"prefix":    "x:",
		"window":    "30m",
		"dedup":     "500ms",
		"fencewait": "3s",
		"gc":        map[any]any{"enabled": true},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Redis.Addrs) != 2 || o.Redis.Password != "p" || o.Redis.DB != 3 || o.Redis.MasterName != "m" ||
		o.Prefix != "x:" || o.Window != 30*time.Minute || o.Dedup != 500*time.Millisecond || o.FenceWait != 3*time.Second ||
		!o.GC.Enabled {
		t.Fatalf("decoded %+v", o)
	}
	if o.AccessTTL < 2*o.Window || o.Timeout != time.Second || o.EpochInterval != 5*time.Second {
		t.Fatalf("defaults %+v", o)
	}
}

// One window, one default: the GC API, the reclaimer, the queue's delay
// and the middleware all read Options.Window.
func TestDecodeDefaults(t *testing.T) {
	o, err := decode(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := Options{
		Prefix: "reclaim:", Window: 24 * time.Hour, AccessTTL: 7 * 24 * time.Hour, Dedup: time.Second,
		FenceWait: 2 * time.Second, FencePoll: 100 * time.Millisecond, Timeout: time.Second, EpochInterval: 5 * time.Second,
		GC:        GC{Cap: defaultCap, DryRuns: defaultDryRuns, DryRunWait: defaultDryRunWait},
		Reclaimer: Reclaimer{Interval: defaultReclaimerInterval, Batch: defaultReclaimerBatch, UsageRefresh: 4, UsageMaxAge: time.Hour, ScrubRepos: 2},
		Retention: Retention{KeepNewest: 10, RollbackSlack: 3, MinAge: 365 * 24 * time.Hour, Cap: 1000, InUseMaxAge: 24 * time.Hour,
			PlanMaxAge: 7 * 24 * time.Hour, PlanKeep: 30 * 24 * time.Hour, Recheck: time.Second},
		HTTP: HTTP{ReadHeaderTimeout: 30 * time.Second, BodyIdleTimeout: time.Minute, IdleTimeout: 2 * time.Minute},
		// the rate is Load's to pick, by driver
		Budget: Budget{Rate: -1, InFlight: defaultBudgetInFlight},
		Trash:  Trash{PurgeBatch: defaultReclaimerBatch}, // off
	}
	if o.Redis.Addrs != nil || o.DescriptorCache != nil {
		t.Fatalf("redis %+v", o.Redis)
	}
	o.Redis = want.Redis
	if !reflect.DeepEqual(o, want) {
		t.Fatalf("defaults\n got %+v\nwant %+v", o, want)
	}
	if o, _ := decode(map[string]any{"window": "2m"}); o.Window != 2*time.Minute || o.AccessTTL != 7*24*time.Hour {
		t.Fatalf("window 2m: %+v", o)
	}
}

func TestDecodeRetention(t *testing.T) {
	o, err := decode(map[string]any{"retention": map[any]any{"keepnewest": 0, "rollbackslack": 1, "minage": "90d", "include": []any{"v*"}}})
	if err == nil {
		t.Fatalf("90d is no Go duration: %+v", o.Retention)
	}
	o, err = decode(map[string]any{"retention": map[any]any{"keepnewest": 0, "rollbackslack": 1, "minage": "2160h", "include": []any{"v*"}, "exclude": []any{"v*-rc*"}}})
	r := o.Retention
	if err != nil || r.KeepNewest != 0 || r.RollbackSlack != 1 || r.MinAge != 2160*time.Hour || len(r.Include) != 1 || r.Exclude[0] != "v*-rc*" {
		t.Fatalf("%+v %v", r, err)
	}
	o, err = decode(map[string]any{"retention": map[any]any{"pulledwithin": "720h",
		"ignorepullsfrom": map[any]any{"useragents": []any{"Trivy/", "clair"}, "accounts": []any{"scanner"}}}})
	if r := o.Retention; err != nil || r.PulledWithin != 720*time.Hour || len(r.IgnorePullsFrom.UserAgents) != 2 || r.IgnorePullsFrom.Accounts[0] != "scanner" {
		t.Fatalf("pulls: %+v %v", o.Retention, err)
	}
	for _, bad := range []map[string]any{{"keepnewest": -1}, {"plankeep": "24h"}, {"planmaxage": "1000h"}, {"cap": 0}, {"include": "v*"},
		{"pulledwithin": "0s"}, {"ignorepullsfrom": map[string]any{"useragents": []any{""}}}, {"ignorepullsfrom": map[string]any{"hosts": []any{"x"}}}} {
		if _, err := decode(map[string]any{"retention": bad}); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

func TestDecodeBlocks(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts map[string]any
		gc   GC
		rc   Reclaimer
	}{
		{"gc block, yaml v2 map", map[string]any{"gc": map[any]any{"enabled": true, "cap": 5, "untagged": "keep"}},
			GC{Enabled: true, Cap: 5, KeepUntagged: true}, Reclaimer{}},
		{"gc block, override allowed", map[string]any{"gc": map[string]any{"untagged": "keep", "AllowUntaggedOverride": true}},
			GC{Cap: defaultCap, KeepUntagged: true, AllowUntaggedOverride: true}, Reclaimer{}},
		{"gc block, string map", map[string]any{"gc": map[string]any{"enabled": true, "untagged": "delete", "cap": 0}},
			GC{Enabled: true, Cap: defaultCap}, Reclaimer{}},
		{"empty blocks", map[string]any{"gc": nil, "reclaimer": nil}, GC{Cap: defaultCap}, Reclaimer{}},
		{"reclaimer block", map[string]any{"reclaimer": map[any]any{"enabled": true, "interval": "30s", "batch": 7, "workers": 2, "lease": "5s"}},
			GC{Cap: defaultCap}, Reclaimer{Enabled: true, Interval: 30 * time.Second, Batch: 7, Workers: 2, Lease: 5 * time.Second}},
		{"kill switch", map[string]any{"reclaimer": map[string]any{"enabled": false, "interval": "1s"}},
			GC{Cap: defaultCap}, Reclaimer{Interval: time.Second, Batch: defaultReclaimerBatch}},
		{"any case", map[string]any{"GC": map[string]any{"Enabled": true}}, GC{Enabled: true, Cap: defaultCap}, Reclaimer{}},
		{"scrub", map[string]any{"reclaimer": map[string]any{"scrubrepos": 5}}, GC{Cap: defaultCap}, Reclaimer{UsageRefresh: defaultUsageRefresh, ScrubRepos: 5}},
		{"scrub off", map[string]any{"reclaimer": map[string]any{"scrubrepos": 0}}, GC{Cap: defaultCap}, Reclaimer{UsageRefresh: defaultUsageRefresh}},
		{"dry runs", map[string]any{"gc": map[string]any{"dryruns": 2, "dryrunwait": "0s"}}, GC{Cap: defaultCap, DryRuns: 2, DryRunWait: -1}, Reclaimer{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := decode(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if tc.rc == (Reclaimer{}) {
				tc.rc = Reclaimer{UsageRefresh: defaultUsageRefresh}
			}
			if tc.rc.Interval == 0 {
				tc.rc.Interval, tc.rc.Batch = defaultReclaimerInterval, defaultReclaimerBatch
			}
			if tc.rc.UsageMaxAge == 0 {
				tc.rc.UsageMaxAge = defaultUsageMaxAge
			}
			if !strings.HasPrefix(tc.name, "scrub") {
				tc.rc.ScrubRepos = defaultScrubRepos
			}
			if tc.name != "usage refresh" && tc.name != "usage refresh off" {
				tc.rc.UsageRefresh = defaultUsageRefresh
			}
			if tc.gc.DryRuns == 0 {
				tc.gc.DryRuns = defaultDryRuns
			}
			switch tc.gc.DryRunWait {
			case 0:
				tc.gc.DryRunWait = defaultDryRunWait
			case -1: // configured 0s
				tc.gc.DryRunWait = 0
			}
			if o.GC != tc.gc || o.Reclaimer != tc.rc {
				t.Fatalf("got %+v %+v, want %+v %+v", o.GC, o.Reclaimer, tc.gc, tc.rc)
			}
		})
	}
}

// Every invalid option is reported by its name as written in config.yml,
// so `registry serve` can tell the operator which line to fix.
func TestDecodeNamesTheOption(t *testing.T) {
	for _, c := range []struct {
		opts   map[string]any
		option string
		msg    string
	}{
		{map[string]any{"windw": "1h"}, "windw", "unknown option"},
		{map[string]any{"window": 3600}, "window", "must be a duration"},
		{map[string]any{"window": "soon"}, "window", `got "soon"`},
		{map[string]any{"window": "-1h"}, "window", "must be a positive duration, got -1h0m0s"},
		{map[string]any{"window": "0s"}, "window", "must be a positive duration, got 0s"},
		{map[string]any{"window": 0}, "window", "must be a duration"},
		{map[string]any{"dedup": "-1s"}, "dedup", "must not be negative"},
		{map[string]any{"fencepoll": "-1s"}, "fencepoll", "positive"},
		{map[string]any{"window": "5s", "dedup": "1s"}, "dedup", "a tenth of the window"},
		{map[string]any{"window": "1h", "accessttl": "90m"}, "accessttl", "twice the window"},
		{map[string]any{"window": "1h", "Window": "2h"}, "window", `given twice (also as "Window")`},
		{map[string]any{"redis": "localhost:6379"}, "redis", "must be a map"},
		{map[string]any{"redis": map[any]any{"addrs": "x"}}, "redis.addrs", "must be a list"},
		{map[string]any{"redis": map[any]any{"addrs": []any{1}}}, "redis.addrs", "must be a string"},
		{map[string]any{"redis": map[any]any{"db": "0"}}, "redis.db", "must be an integer"},
		{map[string]any{"redis": map[any]any{"adrs": []any{}}}, "redis.adrs", "unknown option"},
		{map[string]any{"redis": map[any]any{"tls": map[any]any{"enabled": "yes"}}}, "redis.tls.enabled", "true or false"},
		{map[string]any{"gc": map[string]any{"untagged": "kepp"}}, "gc.untagged", "delete or keep"},
		{map[string]any{"gc": map[string]any{"enabled": "yes"}}, "gc.enabled", "true or false"},
		{map[string]any{"gc": map[string]any{"allowuntaggedoverride": "yes"}}, "gc.allowuntaggedoverride", "true or false"},
		{map[string]any{"gc": map[string]any{"cap": -1}}, "gc.cap", "non-negative integer"},
		{map[string]any{"gc": map[string]any{"enable": true}}, "gc.enable", "unknown option"},
		{map[string]any{"gc": true}, "gc", "must be a map"},
		{map[string]any{"reclaimer": map[string]any{"enable": true}}, "reclaimer.enable", "unknown option"},
		{map[string]any{"reclaimer": map[string]any{"enabled": "yes"}}, "reclaimer.enabled", "true or false"},
		{map[string]any{"reclaimer": map[string]any{"interval": "soon"}}, "reclaimer.interval", "positive duration"},
		{map[string]any{"reclaimer": map[string]any{"interval": "-1s"}}, "reclaimer.interval", "positive duration"},
		{map[string]any{"reclaimer": map[string]any{"batch": 0}}, "reclaimer.batch", "positive integer"},
		{map[string]any{"reclaimer": "on"}, "reclaimer", "must be a map"},
		{map[string]any{"reclaimer": map[string]any{"usagerefresh": -1}}, "reclaimer.usagerefresh", "non-negative integer"},
		{map[string]any{"reclaimer": map[string]any{"usagerefresh": "4"}}, "reclaimer.usagerefresh", "non-negative integer"},
		{map[string]any{"reclaimer": map[string]any{"usagemaxage": "0s"}}, "reclaimer.usagemaxage", "positive duration"},
		{map[string]any{"reclaimer": map[string]any{"scrubrepos": -1}}, "reclaimer.scrubrepos", "non-negative integer"},
		{map[string]any{"reclaimer": map[string]any{"scrubrepos": "2"}}, "reclaimer.scrubrepos", "non-negative integer"},
		{map[string]any{"http": map[string]any{"readheadertimeout": "0s"}}, "http.readheadertimeout", "positive duration"},
		{map[string]any{"http": map[string]any{"bodyidletimeout": "-1s"}}, "http.bodyidletimeout", "positive duration"},
		{map[string]any{"http": map[string]any{"idletimeout": 5}}, "http.idletimeout", "positive duration"},
		{map[string]any{"http": map[string]any{"readtimeout": "1m"}}, "http.readtimeout", "unknown option"},
		// the table names an option in a block gc.cap; a key is one name, never a path
		{map[string]any{"gc.cap": 1}, "gc.cap", "unknown option"},
		{map[string]any{"redis": map[string]any{"tls.enabled": true}}, "redis.tls.enabled", "unknown option"},
		{map[string]any{"g": map[string]any{"cap": 1}}, "g", "unknown option"},
		{map[string]any{"gc": map[string]any{"cap": map[string]any{}}}, "gc.cap", "non-negative integer"},
	} {
		_, err := decode(c.opts)
		var oe *OptionError
		if !errors.As(err, &oe) || !errors.Is(err, ErrBadOptions) {
			t.Errorf("decode(%v) = %v, want an *OptionError matching ErrBadOptions", c.opts, err)
			continue
		}
		if oe.Option != c.option || !strings.Contains(oe.Err.Error(), c.msg) {
			t.Errorf("decode(%v): option %q, %q; want option %q, %q", c.opts, oe.Option, oe.Err, c.option, c.msg)
		}
		if want := `config: middleware reclaim: option "` + c.option + `": `; !strings.HasPrefix(err.Error(), want) {
			t.Errorf("decode(%v) = %q, want it to start with %q", c.opts, err, want)
		}
	}
}

// The ignored writegrace option of old configs is still parsed: a bad value
// is an error.
func TestDecodeWriteGrace(t *testing.T) {
	if _, err := decode(map[string]any{"writegrace": "5s"}); err != nil {
		t.Fatal(err)
	}
	if _, err := decode(map[string]any{"writegrace": "soon"}); !errors.Is(err, ErrBadOptions) {
		t.Fatalf("bad writegrace: %v", err)
	}
}

// The http: block sets the server's timeouts; a key left out keeps its
// default, the same as without the middleware (DefaultHTTP).
func TestDecodeHTTP(t *testing.T) {
	o, err := decode(map[string]any{"http": map[any]any{"readheadertimeout": "5s", "IdleTimeout": "10m"}})
	if err != nil {
		t.Fatal(err)
	}
	want := HTTP{ReadHeaderTimeout: 5 * time.Second, BodyIdleTimeout: DefaultHTTP().BodyIdleTimeout, IdleTimeout: 10 * time.Minute}
	if o.HTTP != want {
		t.Fatalf("http %+v, want %+v", o.HTTP, want)
	}
}

// The budget block: absent, the rate is the driver's default (Load) and 32
// in flight; 0 turns either limit off; a negative one is refused.
func TestDecodeBudget(t *testing.T) {
	o, err := decode(map[string]any{"budget": map[string]any{"rate": 0, "inflight": 0}})
	if err != nil || o.Budget != (Budget{}) {
		t.Fatalf("budget 0/0: %+v, %v", o.Budget, err)
	}
	o, err = decode(map[string]any{"budget": map[string]any{"rate": 200}})
	if err != nil || o.Budget != (Budget{Rate: 200, InFlight: defaultBudgetInFlight}) {
		t.Fatalf("budget rate 200: %+v, %v", o.Budget, err)
	}
	_, err = decode(map[string]any{"budget": map[string]any{"inflight": -1}})
	var oe *OptionError
	if !errors.As(err, &oe) || oe.Option != "budget.inflight" {
		t.Fatalf("inflight -1: %v", err)
	}
	for driver, want := range map[string]int{"filesystem": 0, "inmemory": 0, "s3": defaultBudgetRate, "gcs": defaultBudgetRate} {
		if got := DefaultBudgetRate(driver); got != want {
			t.Errorf("DefaultBudgetRate(%s) = %d, want %d", driver, got, want)
		}
	}
}
