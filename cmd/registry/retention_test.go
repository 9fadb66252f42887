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

// preview aborts (exit 4) on an empty index, then previews with the flags
// as overrides, and apply deletes the planned tags.
func TestRetentionPreviewApply(t *testing.T) {
	r := registrytest.Start(t, registrytest.WithStorageMiddleware("reclaim", map[string]any{
		"window": "1s", "dedup": "10ms", "gc": map[string]any{"enabled": true}}))
	var last inuse.Image
	for i := range 4 {
		tag := fmt.Sprintf("v%d", i)
		img := registrytest.PushImage(t, r, "cli/app:"+tag, 1)
		at := time.Now().Add(time.Duration(i-400) * 24 * time.Hour)
		if err := os.Chtimes(filepath.Join(r.Root, filepath.FromSlash(layout.TagCurrentPath("cli/app", tag))), at, at); err != nil {
			t.Fatal(err)
		}
		d, _ := img.Digest()
		last = inuse.Image{Repository: "cli/app", Digest: digest.Digest(d.String())}
	}
	if _, errOut, code := runRetention(t, "preview", "cli/app", "--url", r.URL); code != exitRetry || !strings.Contains(errOut, "inuse_empty") {
		t.Fatalf("empty index: exit %d %s", code, errOut)
	}
	body, _ := json.Marshal(map[string]any{"images": []inuse.Image{last}})
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPut, r.URL+"/gc/v1/inuse/sources/prod", bytes.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("declare: %v %v", resp, err)
	}
	resp.Body.Close()
	out, errOut, code := runRetention(t, "preview", "cli/app", "--url", r.URL, "--rollback-slack", "1", "--min-age", "720h", "-v")
	m := regexp.MustCompile(`plan ([0-9a-f]{24}): 2 versions to delete \(2 tags\), 2 kept`).FindStringSubmatch(out)
	if code != 0 || m == nil || !strings.Contains(out, "rollback_slack") {
		t.Fatalf("preview: exit %d\n%s\n%s", code, out, errOut)
	}
	out, errOut, code = runRetention(t, "apply", "cli/app", m[1], "--url", r.URL)
	if code != 0 || !strings.Contains(out, "2 tags deleted, 0 left") {
		t.Fatalf("apply: exit %d\n%s\n%s", code, out, errOut)
	}
	if out, _, code = runRetention(t, "plans", "--url", r.URL, "--since", "1h"); code != 0 || !strings.Contains(out, m[1]) {
		t.Fatalf("plans: exit %d %s", code, out)
	}
}
