package storage

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

func TestParseOptions(t *testing.T) {
	o, err := ParseOptions(map[string]any{
		"redis":     map[any]any{"addrs": []any{"a:1", "b:2"}, "password": "p", "db": 3, "mastername": "m"},
		"prefix":    "x:",
		"window":    "30m",
		"dedup":     "500ms",
		"fencewait": "3s",
		"gc":        map[any]any{"enabled": true}, // the registry package's
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Redis.Addrs) != 2 || o.Redis.Password != "p" || o.Redis.DB != 3 || o.Redis.MasterName != "m" ||
		o.Prefix != "x:" || o.Window != 30*time.Minute || o.Dedup != 500*time.Millisecond || o.FenceWait != 3*time.Second {
		t.Fatalf("parsed %+v", o)
	}
	if o.AccessTTL < 2*o.Window || o.Timeout != time.Second || o.EpochInterval != 5*time.Second {
		t.Fatalf("defaults %+v", o)
	}
	for _, bad := range []map[string]any{
		{"windw": "1h"},                         // typo
		{"window": 3600},                        // not a duration string
		{"window": "-1h"},                       // negative
		{"window": "5s", "dedup": "1s"},         // dedup not far below the window
		{"window": "1h", "accessttl": "90m"},    // records would expire inside two windows
		{"redis": "localhost:6379"},             // not a map
		{"redis": map[any]any{"addrs": "x"}},    // not a list
		{"redis": map[any]any{"db": "0"}},       // not an int
		{"redis": map[any]any{"adrs": []any{}}}, // typo
	} {
		if _, err := ParseOptions(bad); !errors.Is(err, ErrBadOptions) {
			t.Errorf("ParseOptions(%v) = %v, want ErrBadOptions", bad, err)
		}
	}
}

// Every invalid option is reported by its name as written in config.yml,
// so `registry serve` can tell the operator which line to fix.
func TestParseOptionsNamesTheOption(t *testing.T) {
	for _, c := range []struct {
		opts   map[string]any
		option string
		msg    string
	}{
		{map[string]any{"windw": "1h"}, "windw", "unknown option"},
		{map[string]any{"window": 3600}, "window", "must be a duration"},
		{map[string]any{"window": "soon"}, "window", `got "soon"`},
		{map[string]any{"window": "-1h"}, "window", "must be a positive duration, got -1h0m0s"},
		{map[string]any{"dedup": "-1s"}, "dedup", "must not be negative"},
		{map[string]any{"fencepoll": "-1s"}, "fencepoll", "positive"},
		{map[string]any{"window": "5s", "dedup": "1s"}, "dedup", "a tenth of the window"},
		{map[string]any{"window": "1h", "accessttl": "90m"}, "accessttl", "twice the window"},
		{map[string]any{"redis": "localhost:6379"}, "redis", "must be a map"},
		{map[string]any{"redis": map[any]any{"addrs": "x"}}, "redis.addrs", "must be a list"},
		{map[string]any{"redis": map[any]any{"addrs": []any{1}}}, "redis.addrs", "must be a string"},
		{map[string]any{"redis": map[any]any{"db": "0"}}, "redis.db", "must be an integer"},
		{map[string]any{"redis": map[any]any{"adrs": []any{}}}, "redis.adrs", "unknown option"},
	} {
		_, err := ParseOptions(c.opts)
		var oe *OptionError
		if !errors.As(err, &oe) || !errors.Is(err, ErrBadOptions) {
			t.Errorf("ParseOptions(%v) = %v, want an *OptionError matching ErrBadOptions", c.opts, err)
			continue
		}
		if oe.Option != c.option || !strings.Contains(oe.Err.Error(), c.msg) {
			t.Errorf("ParseOptions(%v): option %q, %q; want option %q, %q", c.opts, oe.Option, oe.Err, c.option, c.msg)
		}
		if want := `option "` + c.option + `": `; !strings.Contains(err.Error(), want) {
			t.Errorf("ParseOptions(%v) = %q, want it to contain %q", c.opts, err, want)
		}
	}
}

func TestOpenMemoizesAndFallsBack(t *testing.T) {
	b := storagetest.Backends(t)[0]
	ctx := context.Background()
	cfg := &configuration.Configuration{}
	cfg.Storage = configuration.Storage{"inmemory": configuration.Parameters{}}
	if _, err := Open(ctx, cfg); err == nil || !strings.Contains(err.Error(), "not configured") {
		t.Fatalf("Open without the middleware: %v", err)
	}
	cfg.Middleware = map[string][]configuration.Middleware{"storage": {{Name: MiddlewareName, Options: map[string]any{"prefix": "memo:"}}}}
	cfg.Redis.Options.Addrs = []string{b.Addr} // Distribution's redis: section
	e1, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e1.Close()
	e2, err := Open(ctx, cfg)
	if err != nil || e2 != e1 {
		t.Fatalf("second Open = %p %v, want the same Env %p", e2, err, e1)
	}
	if e1.Embedded || Current() != e1 {
		t.Fatalf("Embedded=%v Current=%p", e1.Embedded, Current())
	}
	// It records into Distribution's Redis.
	if _, err := b.Mini.Get("memo:since"); err != nil {
		t.Fatalf("epoch not in the configured redis: %v", err)
	}
	// With no redis anywhere: embedded.
	cfg2 := &configuration.Configuration{Storage: cfg.Storage, Middleware: cfg.Middleware}
	e3, err := Open(ctx, cfg2)
	if err != nil {
		t.Fatal(err)
	}
	defer e3.Close()
	if !e3.Embedded || e3 == e1 {
		t.Fatalf("Embedded=%v", e3.Embedded)
	}
	if _, err := e3.Tracker.RecordingSince(ctx); err != nil {
		t.Fatalf("embedded epoch: %v", err)
	}
}
