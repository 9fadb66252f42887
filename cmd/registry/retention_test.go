package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/retention/inuse"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

func runRetention(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	return runCommand(t, newRetentionCommand(), "", args...)
}

// cliHistory pushes n versions of repo tagged v0, v1, ..., dated a day
// apart and over a year old, and returns their images, oldest first.
func cliHistory(t *testing.T, r *registrytest.Registry, repo string, n int) []inuse.Image {
	t.Helper()
	out := make([]inuse.Image, n)
	for i := range n {
		tag := fmt.Sprintf("v%d", i)
		img := registrytest.PushImage(t, r, repo+":"+tag, 1)
		at := time.Now().Add(time.Duration(i-400) * 24 * time.Hour)
		if err := os.Chtimes(filepath.Join(r.Root, filepath.FromSlash(layout.TagCurrentPath(repo, tag))), at, at); err != nil {
			t.Fatal(err)
		}
		d, _ := img.Digest()
		out[i] = inuse.Image{Repository: repo, Digest: digest.Digest(d.String())}
	}
	return out
}

// cliDeclare PUTs the in-use source prod.
func cliDeclare(t *testing.T, r *registrytest.Registry, images ...inuse.Image) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"images": images})
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPut, r.URL+"/gc/v1/inuse/sources/prod", bytes.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("declare: %v %v", resp, err)
	}
	resp.Body.Close()
}

func startCLIRetention(t *testing.T) *registrytest.Registry {
	return registrytest.Start(t, registrytest.WithStorageMiddleware("reclaim", map[string]any{
		"window": "1s", "dedup": "10ms", "gc": map[string]any{"enabled": true}}))
}

var planIDOut = regexp.MustCompile(`plan ([0-9a-f]{24}): `)

// preview aborts (exit 4) on an empty index, then previews with the flags
// as overrides, and apply deletes the planned tags.
func TestRetentionPreviewApply(t *testing.T) {
	r := startCLIRetention(t)
	images := cliHistory(t, r, "cli/app", 4)
	if _, errOut, code := runRetention(t, "preview", "cli/app", "--url", r.URL); code != exitRetry || !strings.Contains(errOut, "inuse_empty") {
		t.Fatalf("empty index: exit %d %s", code, errOut)
	}
	cliDeclare(t, r, images[3])
	out, errOut, code := runRetention(t, "preview", "cli/app", "--url", r.URL, "--rollback-slack", "1", "--min-age", "720h", "-v")
	m := regexp.MustCompile(`plan ([0-9a-f]{24}): 2 versions to delete \(2 tags\), 2 kept`).FindStringSubmatch(out)
	if code != 0 || m == nil || !strings.Contains(out, "rollback_slack") {
		t.Fatalf("preview: exit %d\n%s\n%s", code, out, errOut)
	}
	out, errOut, code = runRetention(t, "apply", "cli/app", m[1], "--url", r.URL)
	if code != 0 || !strings.Contains(out, "2 tags deleted, 0 left") || strings.Contains(out, "index changed") {
		t.Fatalf("apply: exit %d\n%s\n%s", code, out, errOut)
	}
	if out, _, code = runRetention(t, "plans", "--url", r.URL, "--since", "1h"); code != 0 || !strings.Contains(out, m[1]) {
		t.Fatalf("plans: exit %d %s", code, out)
	}
}

// apply says when the in-use index changed since the plan, and
// --stop-if-index-changed stops it then (exit 4) before any delete.
func TestRetentionApplyIndexChanged(t *testing.T) {
	r := startCLIRetention(t)
	images := cliHistory(t, r, "cli/moved", 4)
	cliDeclare(t, r, images[3])
	out, errOut, code := runRetention(t, "preview", "cli/moved", "--url", r.URL, "--rollback-slack", "0", "--min-age", "720h")
	m := planIDOut.FindStringSubmatch(out)
	if code != 0 || m == nil {
		t.Fatalf("preview: exit %d\n%s\n%s", code, out, errOut)
	}
	cliDeclare(t, r, images[3], images[1])
	out, errOut, code = runRetention(t, "apply", "cli/moved", m[1], "--url", r.URL, "--stop-if-index-changed")
	if code != exitRetry || !strings.Contains(errOut, "stopped (inuse_changed)") || !strings.Contains(out, "0 tags deleted") ||
		!strings.Contains(out, "the in-use index changed since this plan") {
		t.Fatalf("apply --stop-if-index-changed: exit %d\n%s\n%s", code, out, errOut)
	}
	out, errOut, code = runRetention(t, "apply", "cli/moved", m[1], "--url", r.URL)
	if code != 0 || !strings.Contains(out, "2 tags deleted, 1 left") || !strings.Contains(out, "protect only themselves") ||
		!strings.Contains(out, "(1 manifests now in use, 0 no longer)") {
		t.Fatalf("apply: exit %d\n%s\n%s", code, out, errOut)
	}
}
