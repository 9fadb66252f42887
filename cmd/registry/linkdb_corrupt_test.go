package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	distregistry "github.com/distribution/distribution/v3/registry"
	"github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/linkdb"
)

// linkdbStorage writes a config for a filesystem storage in a temporary
// directory and returns its path, the storage root and a driver on it.
func linkdbStorage(t *testing.T) (cfg, root string, d *filesystem.Driver) {
	t.Helper()
	dir := t.TempDir()
	root = filepath.Join(dir, "data")
	cfg = filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, "version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: %s\n", root), 0o644); err != nil {
		t.Fatal(err)
	}
	return cfg, root, filesystem.New(filesystem.DriverParameters{RootDirectory: root, MaxThreads: 10})
}

func put(t *testing.T, d *filesystem.Driver, files map[string]string) {
	t.Helper()
	for p, c := range files {
		if err := d.PutContent(context.Background(), p, []byte(c)); err != nil {
			t.Fatal(err)
		}
	}
}

type rebuildJSON struct {
	ReverseRewritten int64            `json:"reverse_rewritten"`
	Damaged          int64            `json:"damaged"`
	Complete         bool             `json:"complete"`
	Counts           map[string]int64 `json:"counts"`
}

// runLinkdbFlag sets a flag of `linkdb <sub>` back to value.
func runLinkdbFlag(t *testing.T, sub, flag, value string) {
	t.Helper()
	cmd, _, err := distregistry.RootCmd.Find([]string{"linkdb", sub})
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Flags().Set(flag, value); err != nil {
		t.Fatal(err)
	}
}

func runRebuildJSON(t *testing.T, cfg string) (int, rebuildJSON) {
	t.Helper()
	// Flags live on the process-wide command: put --json back for the
	// tests that read the text output.
	defer runLinkdbFlag(t, "rebuild", "json", "false")
	code, out := runLinkdb(t, "rebuild", cfg, "--json")
	var res rebuildJSON
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("rebuild --json: %v\n%s", err, out)
	}
	return code, res
}

// Finding 8, first half: a reverse link holding garbage. Verify called it
// corrupt (exit 2) and told the operator to rebuild; rebuild counted it as
// present, exited 0 and marked the link database complete, so verify went
// on saying corrupt. Rebuild now rewrites it.
func TestLinkdbRebuildRewritesGarbageReverseLink(t *testing.T) {
	cfg, root, d := linkdbStorage(t)
	blob := digest.FromString("layer")
	rl := layout.ReverseLinkPath(blob, "team/app", reclaim.LinkLayer)
	put(t, d, map[string]string{
		layout.BlobDataPath(blob):              "layer",
		layout.LayerLinkPath("team/app", blob): blob.String(),
		rl:                                     "garbage\n",
	})
	if code, _ := runLinkdb(t, "verify", cfg); code != 2 {
		t.Fatalf("verify before rebuild: exit %d, want 2 (corrupt)", code)
	}

	code, res := runRebuildJSON(t, cfg)
	if code != 0 || res.ReverseRewritten != 1 || !res.Complete {
		t.Fatalf("rebuild: exit %d, %+v; want exit 0, one reverse link rewritten, complete", code, res)
	}
	b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rl)))
	if err != nil || string(b) != blob.String() {
		t.Fatalf("reverse link after rebuild: %q %v", b, err)
	}
	if code, out := runLinkdb(t, "verify", cfg); code != 0 {
		t.Fatalf("verify after rebuild: exit %d\n%s", code, out)
	}
}

// Finding 8, second half: damage rebuild cannot repair. It used to exit 0
// and (re-)mark the link database complete. Now it exits 2 and leaves the
// marker as it found it; verify agrees that something is wrong.
func TestLinkdbRebuildDamageIsNotMarkedComplete(t *testing.T) {
	manifest := []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",` +
		`"config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a","size":2},"layers":[]}`)
	m := digest.FromBytes(manifest)
	blob := digest.FromString("layer")
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, root string, d *filesystem.Driver)
	}{
		{"truncated manifest", func(t *testing.T, root string, d *filesystem.Driver) {
			put(t, d, map[string]string{
				layout.BlobDataPath(m):                 string(manifest[:len(manifest)/2]),
				layout.RevisionLinkPath("team/app", m): m.String(),
			})
		}},
		{"reverse link directory", func(t *testing.T, root string, d *filesystem.Driver) {
			put(t, d, map[string]string{
				layout.BlobDataPath(blob):              "layer",
				layout.LayerLinkPath("team/app", blob): blob.String(),
			})
			rl := filepath.Join(root, filepath.FromSlash(layout.ReverseLinkPath(blob, "team/app", reclaim.LinkLayer)))
			if err := os.MkdirAll(rl, 0o755); err != nil {
				t.Fatal(err)
			}
		}},
		{"forward link garbage", func(t *testing.T, root string, d *filesystem.Driver) {
			put(t, d, map[string]string{
				layout.BlobDataPath(blob):              "layer",
				layout.LayerLinkPath("team/app", blob): "not a digest",
			})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, root, d := linkdbStorage(t)
			tc.setup(t, root, d)
			// A marker from an earlier rebuild: it must not be renewed.
			earlier := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
			ctx := context.Background()
			if err := linkdb.MarkLinkDBComplete(ctx, d, earlier); err != nil {
				t.Fatal(err)
			}

			code, res := runRebuildJSON(t, cfg)
			if code != 2 || res.Complete || res.Damaged == 0 {
				t.Fatalf("rebuild: exit %d, %+v; want exit 2, not complete, damage counted", code, res)
			}
			since, ok, err := linkdb.LinkDBComplete(ctx, d)
			if err != nil || !ok || !since.Equal(earlier) {
				t.Fatalf("marker after rebuild: %v %v %v, want the earlier %v untouched", since, ok, err, earlier)
			}
			// A second run finds the same damage: nothing was checkpointed
			// as finished.
			if code, res := runRebuildJSON(t, cfg); code != 2 || res.Complete {
				t.Fatalf("second rebuild: exit %d, %+v", code, res)
			}
			if code, out := runLinkdb(t, "verify", cfg); code != 2 {
				t.Fatalf("verify: exit %d, want 2\n%s", code, out)
			}
		})
	}
}
