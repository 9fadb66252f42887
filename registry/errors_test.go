package registry

import (
	"strings"
	"testing"
	"time"

	"github.com/distribution/distribution/v3/configuration"

	"github.com/reclaim-registry/reclaim/gc"
)

func configWith(options map[string]any) *configuration.Configuration {
	return &configuration.Configuration{Middleware: map[string][]configuration.Middleware{
		"storage": {{Name: "reclaim", Options: options}},
	}}
}

func TestParseGCConfig(t *testing.T) {
	for _, tc := range []struct {
		name    string
		config  *configuration.Configuration
		want    GCConfig
		wantErr string
	}{
		{"no middleware", &configuration.Configuration{}, GCConfig{Window: gc.DefaultWindow, Cap: gc.DefaultCap}, ""},
		{"middleware without gc", configWith(map[string]any{"window": "2m"}),
			GCConfig{Present: true, Window: 2 * time.Minute, Cap: gc.DefaultCap}, ""},
		{"gc block, yaml v2 map", configWith(map[string]any{"gc": map[any]any{"enabled": true, "cap": 5, "untagged": "keep"}}),
			GCConfig{Present: true, Enabled: true, Window: gc.DefaultWindow, Cap: 5, KeepUntagged: true}, ""},
		{"gc block, string map", configWith(map[string]any{"window": "1h", "gc": map[string]any{"enabled": true, "untagged": "delete"}}),
			GCConfig{Present: true, Enabled: true, Window: time.Hour, Cap: gc.DefaultCap}, ""},
		{"bad window", configWith(map[string]any{"window": "soon"}), GCConfig{}, "window"},
		{"negative window", configWith(map[string]any{"window": "-1h"}), GCConfig{}, "window"},
		{"bad policy", configWith(map[string]any{"gc": map[string]any{"untagged": "kepp"}}), GCConfig{}, "untagged"},
		{"bad enabled", configWith(map[string]any{"gc": map[string]any{"enabled": "yes"}}), GCConfig{}, "enabled"},
		{"bad cap", configWith(map[string]any{"gc": map[string]any{"cap": -1}}), GCConfig{}, "cap"},
		{"unknown key", configWith(map[string]any{"gc": map[string]any{"enable": true}}), GCConfig{}, "unknown option"},
		{"not a map", configWith(map[string]any{"gc": true}), GCConfig{}, "want a map"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseGCConfig(tc.config)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestStatusOfMapsEveryError(t *testing.T) {
	for err, want := range map[error]int{
		gc.ErrInvalidName:        400,
		errBadRequest:            400,
		errDigestAlgorithm:       400,
		gc.ErrRepositoryNotFound: 404,
		gc.ErrPlanNotFound:       404,
		gc.ErrRepositoryBusy:     409,
		gc.ErrPlanRepository:     404, // never says whose plan it is
		errTooLarge:              413,
		gc.ErrDisabled:           405,
		&gc.AbortError{Reason: gc.AbortRedisUntrusted}: 503,
		errUnavailable:     503,
		errUnauthenticated: 401,
	} {
		if got, _ := statusOf(err); got != want {
			t.Errorf("%v: %d, want %d", err, got, want)
		}
	}
}
