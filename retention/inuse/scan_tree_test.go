package inuse

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// tree writes files (relative path -> body; a body "-> target" is a
// symlink) under a new temporary directory and returns it.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		if target, ok := strings.CutPrefix(body, "-> "); ok {
			err = os.Symlink(target, p)
		} else {
			err = os.WriteFile(p, []byte(body), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func pod(image string) string {
	return "kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a, image: " + image + "}]}\n"
}

// A kustomization cycle fails the scan wherever it starts, naming the
// cycle; so does a kustomization that only a cycle lists, and one that
// lists its own directory or one above it (Kustomize refuses both).
func TestScanCycles(t *testing.T) {
	two := tree(t, map[string]string{
		"good.yaml":                 pod("good"),
		"apps/a/kustomization.yaml": "resources: [../b, pod.yaml]\n",
		"apps/a/pod.yaml":           pod("a"),
		"apps/b/kustomization.yaml": "resources: [../a]\n",
		"apps/c/kustomization.yaml": "resources: [../b]\n", // a root that reaches the cycle
	})
	only := tree(t, map[string]string{
		"a/kustomization.yaml":    "resources: [../b, ../base]\n",
		"b/kustomization.yaml":    "resources: [../a]\n",
		"base/kustomization.yaml": "resources: [pod.yaml]\n",
		"base/pod.yaml":           pod("base"),
	})
	up := tree(t, map[string]string{"kustomization.yaml": "resources: [sub]\n", "sub/kustomization.yaml": "resources: [..]\n"})
	for _, tc := range []struct{ path, want string }{
		{two, "kustomization cycle: " + filepath.Join(two, "apps/b") + " -> " + filepath.Join(two, "apps/a") + " -> " + filepath.Join(two, "apps/b")},
		{filepath.Join(two, "apps"), "kustomization cycle: "},
		{filepath.Join(two, "apps/a"), "kustomization cycle: " + filepath.Join(two, "apps/a") + " -> " + filepath.Join(two, "apps/b") + " -> " + filepath.Join(two, "apps/a")},
		{only, "kustomization cycle: "},
		{up, `kustomization cycle: ` + filepath.Join(up, "sub/kustomization.yaml") + ` lists "..", its own directory or one above it`},
		{tree(t, map[string]string{"k/kustomization.yaml": "resources: [.]\n"}), `lists ".", its own directory`},
	} {
		found, err := Scan(tc.path, Limits{})
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v (found %v), want an error with %q", tc.path, err, found, tc.want)
		}
	}
}

// As Kustomize's default load restrictor: a file resource must be in or
// under the kustomization's directory once symlinks are resolved; a
// directory resource (a base) may be anywhere; an absolute path is refused.
func TestScanKustomizeRestrictions(t *testing.T) {
	dir := tree(t, map[string]string{
		"outside.yaml":                      pod("outside"),
		"base/kustomization.yaml":           "resources: [pod.yaml]\n",
		"base/pod.yaml":                     pod("base"),
		"ok/kustomization.yaml":             "resources: [../base, link.yaml, sub/pod.yaml]\n",
		"ok/link.yaml":                      "-> sub/pod.yaml",
		"ok/sub/pod.yaml":                   pod("sub"),
		"up/kustomization.yaml":             "resources: [../outside.yaml]\n",
		"sibling/kustomization.yaml":        "resources: [../base/pod.yaml]\n",
		"linkout/kustomization.yaml":        "resources: [pod.yaml]\n",
		"linkout/pod.yaml":                  "-> ../outside.yaml",
		"abs/kustomization.yaml":            "resources: [/etc/passwd]\n",
		"nested/k/kustomization.yaml":       "resources: [../../outside.yaml]\n",
		"dotdot/kustomization.yaml":         "resources: [sub/../../outside.yaml]\n",
		"dotdot/sub/.keep":                  "",
		"abs-inside/pod.yaml":               pod("abs"),
		"device/kustomization.yaml":         "resources: [zero.yaml]\n",
		"device/zero.yaml":                  "-> /dev/zero",
		"big/kustomization.yaml":            "resources: [pod.yaml]\n" + strings.Repeat("#", 2048) + "\n",
		"missing-dir/kustomization.yaml":    "resources: [../nowhere]\n",
		"remote/kustomization.yaml":         "resources: [github.com/x/y]\n",
		"dir-no-kust/kustomization.yaml":    "resources: [../dotdot/sub]\n",
		"component/kustomization.yaml":      "components: [../outside.yaml]\n",
		"bases-field/kustomization.yaml":    "bases: [../base/pod.yaml]\n",
		"images-only/kustomization.yaml":    "resources: [../base]\nimages: [{name: base, newTag: '2'}]\n",
		"images-only/not-a-resource.yaml":   pod("not-listed"),
		"symlinked-base/kustomization.yaml": "resources: [base]\n",
		"symlinked-base/base":               "-> ../base",
	})
	abs := filepath.Join(dir, "abs-inside/pod.yaml") // absolute, though inside
	if err := os.WriteFile(filepath.Join(dir, "abs-inside/kustomization.yaml"), []byte("resources: ["+abs+"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		want []string // images on success
		err  string
	}{
		{"ok", []string{"base", "sub", "sub"}, ""},
		{"images-only", []string{"base:2"}, ""},
		{"symlinked-base", []string{"base"}, ""},
		{"up", nil, `resource "../outside.yaml" is outside ` + filepath.Join(dir, "up")},
		{"sibling", nil, `resource "../base/pod.yaml" is outside`},
		{"linkout", nil, `resource "pod.yaml" is outside`},
		{"nested/k", nil, `resource "../../outside.yaml" is outside`},
		{"dotdot", nil, `resource "sub/../../outside.yaml" is outside`},
		{"component", nil, `resource "../outside.yaml" is outside`},
		{"bases-field", nil, `resource "../base/pod.yaml" is outside`},
		{"abs", nil, `resource "/etc/passwd" is an absolute path`},
		{"abs-inside", nil, fmt.Sprintf("resource %q is an absolute path", abs)},
		{"device", nil, `resource "zero.yaml": a character device, not a regular file`},
		{"missing-dir", nil, `resource "../nowhere"`},
		{"remote", nil, "remote resource"},
		{"dir-no-kust", nil, "a directory without a kustomization"},
	} {
		found, err := Scan(filepath.Join(dir, tc.path), Limits{MaxFileSize: 1024})
		switch {
		case tc.err == "" && (err != nil || !slices.Equal(images(found), tc.want)):
			t.Errorf("%s: %v %v, want %v", tc.path, images(found), err, tc.want)
		case tc.err != "" && (!errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: %v (found %v), want an error with %q", tc.path, err, found, tc.err)
		}
	}
	// the kustomization file itself is read within the limit too
	if _, err := Scan(filepath.Join(dir, "big"), Limits{MaxFileSize: 1024}); !errors.Is(err, ErrTooLarge) {
		t.Errorf("big kustomization: %v", err)
	}
}

// A walk follows a symlink with a YAML name to a regular file in the tree,
// not one to a directory in the tree (the walk reaches it in place), and
// fails on a symlink out of the tree or a dangling one; other symlinks are
// ignored like other files. A symlink given as the path is followed.
func TestScanWalkSymlinks(t *testing.T) {
	out := tree(t, map[string]string{"pod.yaml": pod("outside")})
	dir := tree(t, map[string]string{
		"app/pod.yaml":  pod("app"),
		"app/link.yaml": "-> pod.yaml",
		"linkdir":       "-> app",
		"notes.txt":     "-> " + filepath.Join(out, "pod.yaml"),
		"dangling.txt":  "-> nowhere",
	})
	if err := os.Symlink(filepath.Join(dir, "app"), filepath.Join(out, "linkroot")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		want []string
		err  string
	}{
		{dir, []string{"app", "app"}, ""},
		{filepath.Join(out, "linkroot"), []string{"app", "app"}, ""}, // used to find nothing
		{tree(t, map[string]string{"a.yaml": "-> " + filepath.Join(out, "pod.yaml")}), nil, "a.yaml: a symlink out of the scanned tree (to " + filepath.Join(out, "pod.yaml")},
		{tree(t, map[string]string{"d": "-> " + out}), nil, "d: a symlink out of the scanned tree"},
		{tree(t, map[string]string{"a.yaml": "-> nowhere.yaml"}), nil, "a.yaml: no such file"},
		{tree(t, map[string]string{"a.yaml": "-> /dev/null"}), nil, "a.yaml: a symlink to /dev/null, a character device, not a regular file"},
	} {
		found, err := Scan(tc.path, Limits{})
		switch {
		case tc.err == "" && (err != nil || !slices.Equal(images(found), tc.want)):
			t.Errorf("%s: %v %v, want %v", tc.path, images(found), err, tc.want)
		case tc.err != "" && (!errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: %v (found %v), want an error with %q", tc.path, err, found, tc.err)
		}
	}
}

// ScanReader reads one document at a time: the split and the line numbers
// are those of the whole stream (a long line that crosses the read buffer
// is not mistaken for a separator), and the limit counts every byte.
func TestScanReaderStream(t *testing.T) {
	long := "#" + strings.Repeat("x", 64<<10-1) + "---\n" // "---" right after the 64 KiB buffer
	stream := pod("a") + "--- # two\n" + long + pod("b") + "---\n\n" + pod("c") + "---"
	found, err := ScanReader("s", strings.NewReader(stream), Limits{MaxFileSize: int64(len(stream))})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range found {
		got = append(got, f.Image+"@"+f.Where)
	}
	if want := []string{"a@s:1", "b@s:5", "c@s:10"}; !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if _, err := ScanReader("s", strings.NewReader(stream), Limits{MaxFileSize: int64(len(stream) - 1)}); !errors.Is(err, ErrTooLarge) ||
		!strings.Contains(err.Error(), "s: larger than the") {
		t.Fatalf("one byte over: %v", err)
	}
	bad := pod("a") + "---\n" + long + "kind: Pod\nspec:\n\tcontainers: []\n"
	if _, err := ScanReader("s", strings.NewReader(bad), Limits{}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "s:8:") {
		t.Fatalf("parse error line: %v", err)
	}
}
