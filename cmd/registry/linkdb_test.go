package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	distregistry "github.com/distribution/distribution/v3/registry"
	"github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// runLinkdb runs `registry linkdb <args>` and returns its exit code and stdout.
func runLinkdb(t *testing.T, args ...string) (int, string) {
	t.Helper()
	code := -1
	old := linkdbExit
	linkdbExit = func(c int) { code = c }
	defer func() { linkdbExit = old }()
	var out, errOut bytes.Buffer
	root := distregistry.RootCmd
	root.SetArgs(append([]string{"linkdb"}, args...))
	root.SetOut(&out)
	root.SetErr(&errOut)
	defer func() { root.SetArgs(nil); root.SetOut(nil); root.SetErr(nil) }()
	if err := root.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("linkdb %v: %v\n%s", args, err, errOut.String())
	}
	t.Logf("linkdb %v: exit %d\nstderr: %s", args, code, errOut.String())
	return code, out.String()
}

func TestLinkdbCommands(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "data")
	cfg := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, "version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: %s\n", root), 0o644); err != nil {
		t.Fatal(err)
	}
	// An upstream registry: a blob and a layer link, no reverse link.
	ctx := context.Background()
	d := filesystem.New(filesystem.DriverParameters{RootDirectory: root, MaxThreads: 10})
	blob := digest.FromString("layer")
	for p, c := range map[string]string{
		layout.BlobDataPath(blob):              "layer",
		layout.LayerLinkPath("team/app", blob): blob.String(),
	} {
		if err := d.PutContent(ctx, p, []byte(c)); err != nil {
			t.Fatal(err)
		}
	}

	code, out := runLinkdb(t, "verify", cfg, "--json")
	var rep struct {
		Counts   map[string]int `json:"counts"`
		ExitCode int            `json:"exit_code"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("verify --json: %v\n%s", err, out)
	}
	if code != 2 || rep.ExitCode != 2 || rep.Counts["missing_reverse"] != 1 {
		t.Fatalf("verify before rebuild: exit %d, %+v", code, rep)
	}

	code, out = runLinkdb(t, "rebuild", cfg, "--dry-run", "--workers", "2")
	if code != 0 || !strings.Contains(out, "dry-run") || !strings.Contains(out, "1 added") {
		t.Fatalf("rebuild --dry-run: exit %d\n%s", code, out)
	}
	code, _ = runLinkdb(t, "verify", cfg, "--json=false")
	if code != 2 {
		t.Fatalf("dry-run changed storage: verify exit %d", code)
	}

	code, out = runLinkdb(t, "rebuild", cfg, "--dry-run=false")
	if code != 0 || !strings.Contains(out, "complete: true") {
		t.Fatalf("rebuild: exit %d\n%s", code, out)
	}
	code, out = runLinkdb(t, "verify", cfg, "--json=false")
	if code != 0 || !strings.Contains(out, "verdict: clean") || !strings.Contains(out, "complete since") {
		t.Fatalf("verify after rebuild: exit %d\n%s", code, out)
	}

	if code, _ := runLinkdb(t, "verify", filepath.Join(dir, "missing.yml")); code != 3 {
		t.Errorf("verify with a missing config: exit %d, want 3", code)
	}
	if code, _ := runLinkdb(t, "rebuild", filepath.Join(dir, "missing.yml")); code != 1 {
		t.Errorf("rebuild with a missing config: exit %d, want 1", code)
	}
}
