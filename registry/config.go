package registry

import (
	"fmt"
	"time"

	"github.com/distribution/distribution/v3/configuration"

	"github.com/reclaim-registry/reclaim/gc"
	"github.com/reclaim-registry/reclaim/storage"
)

// middlewareName is the storage middleware entry whose options hold
// Reclaim's settings:
//
//	middleware:
//	  storage:
//	    - name: reclaim
//	      options:
//	        window: 24h          # protection window W (parsed here and by storage)
//	        redis: {...}         # parsed by the storage package
//	        gc:
//	          enabled: true      # serve the GC API (default false)
//	          cap: 10000         # max link deletions per run (default 10000)
//	          untagged: delete   # delete | keep (default delete)
const middlewareName = "reclaim"

// GCConfig is the parsed gc block.
type GCConfig struct {
	// Present: the reclaim middleware is configured at all.
	Present      bool
	Enabled      bool
	Window       time.Duration
	Cap          int
	KeepUntagged bool
}

// ParseGCConfig reads the gc settings from config. Unknown keys and values
// of the wrong type are errors: a typo must not silently change a policy.
func ParseGCConfig(config *configuration.Configuration) (GCConfig, error) {
	c := GCConfig{Window: gc.DefaultWindow, Cap: gc.DefaultCap}
	if config == nil {
		return c, nil
	}
	var opts map[string]any
	for _, m := range config.Middleware["storage"] {
		if m.Name == middlewareName && !m.Disabled {
			c.Present, opts = true, m.Options
		}
	}
	if !c.Present {
		return c, nil
	}
	if w, ok := opts["window"]; ok {
		d, err := parseDuration(w)
		if err != nil || d <= 0 {
			return c, fmt.Errorf("reclaim: middleware option window: want a positive duration like 24h, got %v", w)
		}
		c.Window = d
	}
	raw, ok := opts["gc"]
	if !ok || raw == nil {
		return c, nil
	}
	g, ok := storage.OptionMap(raw)
	if !ok {
		return c, fmt.Errorf("reclaim: middleware option gc: want a map, got %T", raw)
	}
	for k, v := range g {
		switch k {
		case "enabled":
			b, ok := v.(bool)
			if !ok {
				return c, fmt.Errorf("reclaim: gc.enabled: want true or false, got %v", v)
			}
			c.Enabled = b
		case "cap":
			n, ok := v.(int)
			if !ok || n < 0 {
				return c, fmt.Errorf("reclaim: gc.cap: want a non-negative integer (0 = default), got %v", v)
			}
			if n > 0 {
				c.Cap = n
			}
		case "untagged":
			switch v {
			case "delete":
				c.KeepUntagged = false
			case "keep":
				c.KeepUntagged = true
			default:
				return c, fmt.Errorf("reclaim: gc.untagged: want delete or keep, got %v", v)
			}
		default:
			return c, fmt.Errorf("reclaim: gc: unknown option %q", k)
		}
	}
	return c, nil
}

func parseDuration(v any) (time.Duration, error) {
	switch x := v.(type) {
	case string:
		return time.ParseDuration(x)
	case time.Duration:
		return x, nil
	}
	return 0, fmt.Errorf("not a duration: %v", v)
}
