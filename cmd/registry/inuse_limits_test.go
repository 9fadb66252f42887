package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reclaim-registry/reclaim/registry/registrytest"
)

// writeTree writes files (relative path -> body) under a new temporary
// directory and returns it.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func podYAML(image string) string {
	return "kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a, image: \"" + image + "\"}]}\n"
}

// Two kustomizations that list each other are a cycle, whichever directory
// the scan starts from: walking their parent used to drop both ("listed by
// another") and upload the rest, so retention saw their images as unused.
func TestInUseScanCycle(t *testing.T) {
	r := registrytest.Start(t, registrytest.WithStorageMiddleware("reclaim", map[string]any{
		"window": "1s", "dedup": "10ms", "gc": map[string]any{"enabled": true}}))
	registrytest.PushImage(t, r, "team/app:v1", 1)
	dir := writeTree(t, map[string]string{
		"good.yaml":                 podYAML(r.Host + "/team/app:v1"),
		"apps/a/kustomization.yaml": "resources: [../b, pod.yaml]\n",
		"apps/a/pod.yaml":           podYAML(r.Host + "/team/app:v1"),
		"apps/b/kustomization.yaml": "resources: [../a]\n",
		"other/kustomization.yaml":  "resources: [pod.yaml]\n",
		"other/pod.yaml":            podYAML(r.Host + "/team/app:v1"),
	})
	for _, start := range []string{dir, filepath.Join(dir, "apps"), filepath.Join(dir, "apps", "a")} {
		_, errOut, code := runInUse(t, "", "scan", start, "--url", r.URL, "--source", "prod")
		if code != exitRejected || !strings.Contains(errOut, "kustomization cycle") ||
			!strings.Contains(errOut, filepath.Join("apps", "a")) || !strings.Contains(errOut, filepath.Join("apps", "b")) {
			t.Errorf("scan %s: exit %d, want %d and a message naming the cycle:\n%s", start, code, exitRejected, errOut)
		}
		if status, got := getSource(t, r, "prod"); status != 404 {
			t.Fatalf("scan %s: a failed scan uploaded %v", start, got)
		}
	}
}

// noUploads is a registry URL that fails the test on any request: a scan
// that fails must fail before it resolves or uploads anything.
func noUploads(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("a failed scan sent %s %s", r.Method, r.URL)
		w.WriteHeader(http.StatusInternalServerError)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// Each file, and standard input, is read up to --max-file-size (16 MiB by
// default): past it the scan fails naming the input and the limit.
func TestInUseScanSizeLimit(t *testing.T) {
	url := noUploads(t)
	dir := t.TempDir()
	sparse := filepath.Join(dir, "big.yaml") // 16 MiB + 1, no disk used
	if err := os.WriteFile(sparse, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(sparse, 16<<20+1); err != nil {
		t.Fatal(err)
	}
	kib := podYAML("r.example/a:1") + "#" + strings.Repeat("x", 1024-len(podYAML("r.example/a:1"))-2) + "\n"
	exact := writeFile(t, dir, "exact.yaml", kib)
	over := writeFile(t, dir, "over.yaml", kib+"\n")
	for _, tc := range []struct {
		name, stdin string
		args        []string
		want        string // "" for success
	}{
		{"default file", "", []string{sparse}, sparse + ": larger than the 16 MiB limit on a scanned file (raise it with --max-file-size)"},
		{"default stdin", strings.Repeat("#"+strings.Repeat("x", 1022)+"\n", 16<<10) + "#", []string{"-"}, "<stdin>: larger than the 16 MiB limit"},
		{"flag file", "", []string{over, "--max-file-size", "1KiB"}, over + ": larger than the 1 KiB limit"},
		{"flag stdin", kib + "\n", []string{"-", "--max-file-size", "1024"}, "<stdin>: larger than the 1 KiB limit"},
		{"flag walk", "", []string{dir, "--max-file-size", "1KiB"}, sparse + ": larger than the 1 KiB limit"},
		{"exact file", "", []string{exact, "--max-file-size", "1KiB"}, ""},
		{"exact stdin", kib, []string{"-", "--max-file-size", "1KiB"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, errOut, code := runInUse(t, tc.stdin, append([]string{"scan", "--url", url, "--registry", "elsewhere.example"}, tc.args...)...)
			if tc.want == "" && (code != 0 || errOut != "1 references to other registries skipped\n") {
				t.Fatalf("exit %d %q, want success", code, errOut)
			}
			if tc.want != "" && (code != exitRejected || !strings.Contains(errOut, tc.want)) {
				t.Fatalf("exit %d %q, want %d and %q", code, errOut, exitRejected, tc.want)
			}
		})
	}
	for _, bad := range []string{"0", "-1", "16MB", "x", "9999999999GiB"} {
		if err := newInUseScanCommand().Flags().Set("max-file-size", bad); err == nil || !strings.Contains(err.Error(), "want a positive size") {
			t.Errorf("--max-file-size %s: %v", bad, err)
		}
	}
}
