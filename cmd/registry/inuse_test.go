package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/retention/inuse"
)

// runInUse runs `inuse <args>` with stdin and returns stdout, stderr and
// the exit code the command asked for (0 when it did not exit).
func runInUse(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	return runCommand(t, newInUseCommand(), stdin, args...)
}

func getSource(t *testing.T, r *registrytest.Registry, name string) (int, []inuse.Image) {
	t.Helper()
	resp := r.Do(t, http.MethodGet, "/gc/v1/inuse/sources/"+name, nil)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var body struct {
		Images []inuse.Image `json:"images"`
	}
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, &body); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
	}
	return resp.StatusCode, body.Images
}

func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// The scan keeps this registry's references, resolves the tag against the
// registry, takes a digest as is, and uploads the set as one source; a file
// that does not parse, or a tag the registry lacks, uploads nothing.
func TestInUseScanUploads(t *testing.T) {
	r := registrytest.Start(t, registrytest.WithStorageMiddleware("reclaim", map[string]any{
		"window": "1s", "dedup": "10ms", "gc": map[string]any{"enabled": true}}))
	img := registrytest.PushImage(t, r, "team/app:v1", 1)
	appD, _ := img.Digest()
	toolD := digest.FromString("tool manifest")
	dir := t.TempDir()
	writeFile(t, dir, "deploy.yaml", `# Source: web/templates/deployment.yaml
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  template:
    spec:
      initContainers: [{name: tool, image: "`+r.Host+`/team/tool@`+toolD.String()+`"}]
      containers:
        - {name: web, image: "`+r.Host+`/team/app:v1"}
        - {name: proxy, image: "nginx:1.27"}
`)
	want := []inuse.Image{{Repository: "team/app", Digest: digest.Digest(appD.String())}, {Repository: "team/tool", Digest: toolD}}

	out, errOut, code := runInUse(t, "", "scan", dir, "--url", r.URL)
	if code != 0 || out != want[0].String()+"\n"+want[1].String()+"\n" || !strings.Contains(errOut, "1 references to other registries skipped") {
		t.Fatalf("print: exit %d\n%s\n%s", code, out, errOut)
	}
	out, errOut, code = runInUse(t, "", "scan", dir, "--url", r.URL, "--source", "prod")
	if code != 0 || !strings.Contains(out, "source prod: 2 images uploaded") {
		t.Fatalf("upload: exit %d\n%s\n%s", code, out, errOut)
	}
	if status, got := getSource(t, r, "prod"); status != 200 || len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("stored: %d %v, want %v", status, got, want)
	}

	// A broken file fails the scan, names file and line, uploads nothing.
	bad := t.TempDir()
	writeFile(t, bad, "ok.yaml", "kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a, image: \""+r.Host+"/team/app:v1\"}]}\n")
	writeFile(t, bad, "bad.yaml", "kind: Pod\nspec:\n  containers:\n    - name: a\n     image: x\n")
	_, errOut, code = runInUse(t, "", "scan", bad, "--url", r.URL, "--source", "prod")
	if code != exitRejected || !strings.Contains(errOut, "bad.yaml:") {
		t.Fatalf("broken file: exit %d %s", code, errOut)
	}
	if _, got := getSource(t, r, "prod"); len(got) != 2 {
		t.Fatalf("a failed scan changed the source: %v", got)
	}

	// A tag the registry lacks fails, unless --allow-missing skips it.
	stdin := "kind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - {name: a, image: \"" + r.Host + "/team/app:nope\"}\n  - {name: b, image: \"" + r.Host + "/team/app\"}\n"
	registrytest.Tag(t, r, "team/app:v1", "latest")
	if _, errOut, code = runInUse(t, stdin, "scan", "-", "--url", r.URL, "--source", "preview"); code != exitFailure || !strings.Contains(errOut, "team/app:nope") {
		t.Fatalf("missing tag: exit %d %s", code, errOut)
	}
	if status, _ := getSource(t, r, "preview"); status != http.StatusNotFound {
		t.Fatalf("a failed scan uploaded: %d", status)
	}
	_, errOut, code = runInUse(t, stdin, "scan", "-", "--url", r.URL, "--source", "preview", "--allow-missing")
	if status, got := getSource(t, r, "preview"); code != 0 || status != 200 || len(got) != 1 || got[0] != want[0] || !strings.Contains(errOut, "skipped") {
		t.Fatalf("--allow-missing: exit %d %s; stored %v", code, errOut, got)
	}
}
