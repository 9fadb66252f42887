package pin

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
)

func TestParseRef(t *testing.T) {
	d := digest.FromString("m")
	for in, want := range map[string]Ref{"v1.2": {Tag: "v1.2"}, "latest": {Tag: "latest"}, "_x-1": {Tag: "_x-1"}, d.String(): {Digest: d}} {
		got, err := ParseRef(in)
		if err != nil || got != want || got.String() != in {
			t.Errorf("%q: %+v %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "-v1", ".v1", "a/b", "sha256:abc", strings.Repeat("x", 129), "v1@" + d.String()} {
		if _, err := ParseRef(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: %v, want ErrInvalid", bad, err)
		}
	}
}

func TestNew(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ref := Ref{Tag: "v1"}
	later := now.Add(time.Hour)
	p, err := New("team/app", ref, Request{Note: "prod-eu", ExpiresIn: "72h"}, now)
	if err != nil || p.ExpiresAt == nil || !p.ExpiresAt.Equal(now.Add(72*time.Hour)) || p.Note != "prod-eu" || p.Ref != "v1" {
		t.Fatalf("%+v %v", p, err)
	}
	if !p.Active(now.Add(71*time.Hour)) || p.Active(now.Add(72*time.Hour)) {
		t.Fatal("expiry is exclusive: active before, not at")
	}
	if p, err := New("team/app", ref, Request{ExpiresAt: &later}, now); err != nil || !p.ExpiresAt.Equal(later) {
		t.Fatalf("%+v %v", p, err)
	}
	if p, err := New("team/app", ref, Request{}, now); err != nil || p.ExpiresAt != nil || !p.Active(now.Add(1e6*time.Hour)) {
		t.Fatalf("no expiry: %+v %v", p, err)
	}
	for name, req := range map[string]Request{
		"both":      {ExpiresAt: &later, ExpiresIn: "1h"},
		"past":      {ExpiresIn: "-1h"},
		"now":       {ExpiresAt: &now},
		"bad ttl":   {ExpiresIn: "3 days"},
		"long note": {Note: strings.Repeat("n", maxNote+1)},
		"bad utf8":  {Note: "\xff"},
	} {
		if _, err := New("team/app", ref, req, now); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}
