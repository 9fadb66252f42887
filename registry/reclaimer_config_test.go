package registry

import (
	"strings"
	"testing"
	"time"

	"github.com/distribution/distribution/v3/configuration"

	"github.com/reclaim-registry/reclaim/gc"
)

func reclaimConfig(opts map[string]any) *configuration.Configuration {
	return &configuration.Configuration{Middleware: map[string][]configuration.Middleware{
		"storage": {{Name: "reclaim", Options: configuration.Parameters(opts)}},
	}}
}

func TestParseReclaimerConfig(t *testing.T) {
	cases := []struct {
		name    string
		block   any
		want    ReclaimerConfig
		wantErr string
	}{
		{"absent", nil, ReclaimerConfig{Interval: gc.DefaultReclaimInterval, Batch: gc.DefaultReclaimBatch}, ""},
		{"full", map[any]any{"enabled": true, "interval": "30s", "batch": 7, "workers": 2, "lease": "5s"},
			ReclaimerConfig{Enabled: true, Interval: 30 * time.Second, Batch: 7, Workers: 2, Lease: 5 * time.Second}, ""},
		{"kill switch", map[string]any{"enabled": false, "interval": "1s"},
			ReclaimerConfig{Interval: time.Second, Batch: gc.DefaultReclaimBatch}, ""},
		{"typo", map[string]any{"enable": true}, ReclaimerConfig{}, "unknown option"},
		{"enabled string", map[string]any{"enabled": "yes"}, ReclaimerConfig{}, "true or false"},
		{"bad interval", map[string]any{"interval": "soon"}, ReclaimerConfig{}, "positive duration"},
		{"negative interval", map[string]any{"interval": "-1s"}, ReclaimerConfig{}, "positive duration"},
		{"zero batch", map[string]any{"batch": 0}, ReclaimerConfig{}, "positive integer"},
		{"not a map", "on", ReclaimerConfig{}, "want a map"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			opts := map[string]any{}
			if c.block != nil {
				opts["reclaimer"] = c.block
			}
			got, err := ParseReclaimerConfig(reclaimConfig(opts))
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err = %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, c.want)
			}
		})
	}
}

func TestReclaimerNotStartedWhenDisabled(t *testing.T) {
	cfg := reclaimConfig(map[string]any{"reclaimer": map[string]any{"enabled": false}})
	h := startReclaimer(t.Context(), cfg)
	defer stopReclaimer(cfg)
	if h.r != nil || h.err != nil {
		t.Fatalf("disabled reclaimer: r=%v err=%v", h.r, h.err)
	}
	if again := startReclaimer(t.Context(), cfg); again != h {
		t.Fatal("started twice for one configuration")
	}
}
