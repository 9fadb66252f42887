package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// brokenRemedy is part of the one wording of what to do about
// broken_forward (linkdb.Kind.Remedy); rebuild and verify both print it.
// wantBroken is the exit code both give when that is the worst finding.
const (
	brokenRemedy = "push the image again, or delete the dangling link"
	wantBroken   = 4
)

// Issue 25, item 9: a layer link to a blob whose data is gone. rebuild
// exited 0 and marked the database complete without a word; verify right
// after exited 2 and called it a data-loss risk. Now both name it
// broken_forward (data already lost, nothing linkdb restores), both exit
// 4, both print the same remedy, and rebuild marks the database complete
// (its reverse links are whole: the link has its reverse link).
func TestLinkdbBrokenForwardAgrees(t *testing.T) {
	cfg, _, d := linkdbStorage(t)
	ok, gone := digest.FromString("layer"), digest.FromString("gone")
	put(t, d, map[string]string{
		layout.BlobDataPath(ok):              "layer",
		layout.LayerLinkPath("team/app", ok): ok.String(),
		// upstream data: the link to the missing blob has no reverse link either
		layout.LayerLinkPath("team/app", gone): gone.String(),
	})

	code, out := runLinkdb(t, "rebuild", cfg)
	if code != wantBroken || !strings.Contains(out, "broken_forward") ||
		!strings.Contains(out, layout.LayerLinkPath("team/app", gone)) || !strings.Contains(out, brokenRemedy) {
		t.Fatalf("rebuild: exit %d, want %d listing the broken link and the remedy\n%s", code, wantBroken, out)
	}
	if !strings.Contains(out, "complete: true") {
		t.Errorf("rebuild did not mark the link database complete:\n%s", out)
	}
	code, out = runLinkdb(t, "verify", cfg)
	if code != wantBroken || !strings.Contains(out, brokenRemedy) || strings.Contains(out, "DATA-LOSS") ||
		strings.Contains(out, "linkdb rebuild") {
		t.Fatalf("verify: exit %d, want %d with the same remedy, no data-loss verdict and no rebuild advice\n%s", code, wantBroken, out)
	}
}

// rebuild --dry-run lists what verify lists (a missing reverse link, a
// broken forward link, a stale reverse link) and writes nothing.
func TestLinkdbRebuildDryRunListsFindings(t *testing.T) {
	cfg, root, d := linkdbStorage(t)
	ok, gone, old := digest.FromString("layer"), digest.FromString("gone"), digest.FromString("old")
	put(t, d, map[string]string{
		layout.BlobDataPath(ok):                                    "layer",
		layout.LayerLinkPath("team/app", ok):                       ok.String(),
		layout.LayerLinkPath("team/app", gone):                     gone.String(),
		layout.BlobDataPath(old):                                   "old",
		layout.ReverseLinkPath(old, "team/old", reclaim.LinkLayer): old.String(),
	})
	before := tree(t, root)
	defer runLinkdbFlag(t, "rebuild", "dry-run", "false")
	defer runLinkdbFlag(t, "rebuild", "min-age", "10m")
	code, out := runLinkdb(t, "rebuild", cfg, "--dry-run", "--min-age", "0")
	if after := tree(t, root); after != before {
		t.Fatalf("rebuild --dry-run wrote:\nbefore %s\nafter  %s", before, after)
	}
	for _, want := range []string{
		"missing_reverse", layout.LayerLinkPath("team/app", ok),
		"broken_forward", layout.LayerLinkPath("team/app", gone), brokenRemedy,
		"stale_reverse", layout.ReverseLinkPath(old, "team/old", reclaim.LinkLayer),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("rebuild --dry-run does not list %q", want)
		}
	}
	if code != wantBroken {
		t.Errorf("rebuild --dry-run: exit %d, want %d", code, wantBroken)
	}
	t.Logf("%s", out)
}

// tree lists every file under root with its content.
func tree(t *testing.T, root string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		c := ""
		if !fi.IsDir() {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			c = string(data)
		}
		b.WriteString(p + "=" + c + "\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// Issue 25, low: a link path that is a symlink to a file outside the
// storage root. verify (and rebuild) read it through the filesystem
// driver and printed its first bytes; they now describe it without
// quoting it.
func TestLinkdbDoesNotPrintFilesOutsideRoot(t *testing.T) {
	cfg, root, d := linkdbStorage(t)
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("TOPSECRET-password-1234"), 0o600); err != nil {
		t.Fatal(err)
	}
	blob := digest.FromString("layer")
	put(t, d, map[string]string{
		layout.BlobDataPath(blob):              "layer",
		layout.LayerLinkPath("team/app", blob): blob.String(),
	})
	links := map[string]string{
		"reverse": layout.ReverseLinkPath(blob, "team/app", reclaim.LinkLayer),
		"tag":     layout.TagCurrentPath("team/app", "v1"),
		"forward": layout.LayerLinkPath("team/other", blob),
	}
	for _, p := range links {
		full := filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(secret, full); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"verify", cfg}, {"verify", cfg, "--json"}, {"rebuild", cfg, "--dry-run"}} {
		_, out := runLinkdb(t, args...)
		if strings.Contains(out, "TOPSECRET") {
			t.Errorf("linkdb %v printed the content of a file outside the root:\n%s", args, out)
		}
		if !strings.Contains(out, "corrupt") {
			t.Errorf("linkdb %v does not report the symlinks as corrupt:\n%s", args, out)
		}
	}
	runLinkdbFlag(t, "verify", "json", "false")
	runLinkdbFlag(t, "rebuild", "dry-run", "false")
}
