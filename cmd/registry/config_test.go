package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reclaim-registry/reclaim/internal/config"
	"github.com/reclaim-registry/reclaim/registry"
	"github.com/reclaim-registry/reclaim/registry/registrytest"
)

func TestMain(m *testing.M) { registrytest.Main(m) }

// badReclaimOptions are reclaim middleware option blocks (YAML, indented
// under `options:`) that must stop every command reading them, and the
// option each must name.
var badReclaimOptions = []struct {
	name, yaml, option string
}{
	{"unknown key", "windw: 1h", `option "windw": unknown option`},
	{"bad duration", "window: soon", `option "window": must be a duration`},
	{"negative window", "window: -1h", `option "window": must be a positive duration`},
	{"zero window", "window: 0s", `option "window": must be a positive duration`},
	{"wrong type", "window: 3600", `option "window": must be a duration`},
	{"nested wrong type", "redis:\n          db: zero", `option "redis.db": must be an integer`},
	{"dedup too close to window", "window: 5s\n        dedup: 1s", `option "dedup"`},
	{"gc block", "gc:\n          cap: -1", `option "gc.cap": must be a non-negative integer`},
	{"reclaimer block", "reclaimer:\n          enabled: \"yes\"", `option "reclaimer.enabled": must be true or false`},
}

func writeBadConfig(t *testing.T, options string) string {
	t.Helper()
	dir := t.TempDir()
	cfg := `version: 0.1
log:
  level: info
storage:
  filesystem:
    rootdirectory: ` + filepath.Join(dir, "data") + `
http:
  addr: 127.0.0.1:0
middleware:
  storage:
    - name: reclaim
      options:
        ` + options + "\n"
	path := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Every command that reads the reclaim middleware options from a config
// file stops on a bad one with exit 1 and a single stderr line naming the
// option, never with Distribution's panic and stack trace. It runs the real
// binary, so a panic cannot be recovered or hidden.
func TestBadReclaimOptionsExitWithOneLine(t *testing.T) {
	bin := registrytest.Binary(t)
	commands := []struct {
		args   []string
		prefix string
	}{
		{[]string{"serve"}, "registry: config: middleware reclaim: "},
		{[]string{"linkdb", "rebuild"}, "linkdb rebuild: config: middleware reclaim: "},
		{[]string{"gc", "sweep"}, "gc sweep: config: middleware reclaim: "},
	}
	for _, c := range badReclaimOptions {
		path := writeBadConfig(t, c.yaml)
		for _, cmd := range commands {
			t.Run(c.name+"/"+strings.Join(cmd.args, " "), func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				run := exec.CommandContext(ctx, bin, append(cmd.args, path)...)
				run.Env = registrytest.ChildEnv()
				var stdout, stderr bytes.Buffer
				run.Stdout, run.Stderr = &stdout, &stderr
				err := run.Run()
				if ctx.Err() != nil {
					t.Fatalf("still running after a minute: it accepted the options\nstderr: %s", stderr.String())
				}
				var exit *exec.ExitError
				if !errors.As(err, &exit) || exit.ExitCode() != 1 {
					t.Errorf("exit: %v, want exit status 1", err)
				}
				all := stdout.String() + stderr.String()
				if strings.Contains(all, "panic") || strings.Contains(all, "goroutine") {
					t.Fatalf("output has a panic or stack trace:\n%s", all)
				}
				lines := strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n")
				if len(lines) != 1 {
					t.Errorf("stderr has %d lines, want 1:\n%s", len(lines), stderr.String())
				}
				if !strings.HasPrefix(lines[0], cmd.prefix) || !strings.Contains(lines[0], c.option) {
					t.Errorf("stderr %q, want %q...%q", lines[0], cmd.prefix, c.option)
				}
			})
		}
	}
}

// GC on a pull-through cache is refused at start-up in one line: the proxy
// stores manifests without verifying their references.
func TestServeRefusesProxyGC(t *testing.T) {
	for _, tc := range []struct {
		block string
		want  bool
	}{
		{"gc:\n          enabled: true", true},
		{"reclaimer:\n          enabled: true", true},
		{"gc:\n          enabled: false", false},
	} {
		path := writeBadConfig(t, tc.block)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, append(b, "proxy:\n  remoteurl: http://127.0.0.1:1\n"...), 0o600); err != nil {
			t.Fatal(err)
		}
		conf, err := readConfig(path)
		if err != nil {
			t.Fatal(err)
		}
		srv, err := registry.New(t.Context(), conf)
		if err == nil {
			srv.Close()
		}
		if got := errors.Is(err, config.ErrProxyGC); got != tc.want {
			t.Fatalf("%q on a proxy: %v, want refused=%v", tc.block, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Fatalf("not one line: %q", err)
		}
	}
}
