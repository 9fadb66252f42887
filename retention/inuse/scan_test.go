package inuse

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const (
	webDigest    = "sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae"
	reportDigest = "sha256:fcde2b2edba56bf408601fb721fe9b5c338d10ee429ea04fae5511b68fbf8fb9"
	envoyDigest  = "sha256:b5bb9d8014a0f9b1d61e21e796d78dccdf1352f23cd32812f4850b878ae4944c"
)

func images(fs []Found) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Image)
	}
	slices.Sort(out)
	return out
}

// Real-world shapes: Helm output with `---` and comments, Kustomize
// overlays, CronJob templates, init and ephemeral containers, List kinds,
// JSON, references with a registry port, tag plus digest, no tag.
func TestScan(t *testing.T) {
	for _, tc := range []struct {
		path string
		want []string
	}{
		{"testdata/helm/rendered.yaml", []string{"busybox", "docker.io/library/nginx",
			"registry.example.com:5000/team/migrate:v7", "registry.example.com:5000/team/web:1.2.3@" + webDigest}},
		{"testdata/plain/cronjob.yaml", []string{"registry.example.com:5000/team/report@" + reportDigest}},
		{"testdata/plain/list.yaml", []string{"registry.example.com:5000/infra/agent:2.0",
			"registry.example.com:5000/team/app", "registry.example.com:5000/tools/debug:1"}},
		{"testdata/plain/values.yaml", nil},
		{"testdata/kustomize/overlays/prod", []string{"envoyproxy/envoy@" + envoyDigest,
			"registry.example.com:5000/team/api:3.1.0", "registry.example.com:5000/team/api:3.1.0"}},
		// A walk: the base is listed by both overlays, so only they count.
		{"testdata/kustomize", []string{"envoyproxy/envoy:v1.30.0", "envoyproxy/envoy@" + envoyDigest,
			"registry.example.com:5000/team/api:3.1.0", "registry.example.com:5000/team/api:3.1.0",
			"registry.example.com:5000/team/api:dev", "registry.example.com:5000/team/api:dev"}},
		{"testdata/plain", []string{"registry.example.com:5000/data/postgres:16", "registry.example.com:5000/infra/agent:2.0",
			"registry.example.com:5000/team/app", "registry.example.com:5000/team/report@" + reportDigest,
			"registry.example.com:5000/tools/debug:1"}},
	} {
		t.Run(tc.path, func(t *testing.T) {
			found, err := Scan(tc.path, Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if got := images(found); !slices.Equal(got, tc.want) {
				t.Fatalf("got  %q\nwant %q", got, tc.want)
			}
			for _, f := range found {
				if f.Where == "" || f.Object == "" || f.Field == "" {
					t.Fatalf("%+v: where, object and field must be set", f)
				}
			}
		})
	}
}

func TestScanNamesWhere(t *testing.T) {
	found, err := Scan("testdata/helm/rendered.yaml", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		if f.Image == "busybox" && (f.Where != "testdata/helm/rendered.yaml:38" || f.Object != "Pod/web-test" || f.Field != "spec.containers[0]") {
			t.Fatalf("%+v", f)
		}
		if f.Image == "registry.example.com:5000/team/migrate:v7" && f.Field != "spec.template.spec.initContainers[0]" {
			t.Fatalf("%+v", f)
		}
	}
}

// A file that does not parse fails the scan, naming the file and the
// line; it never yields "no images". So does a workload without an image
// and a kustomization whose resource is missing or remote.
func TestScanFailures(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct{ path, want string }{
		{"testdata/broken/bad.yaml", "testdata/broken/bad.yaml:15:"},
		{"testdata/broken", "testdata/broken/bad.yaml:15:"},
		{write("tabs.yaml", "kind: Pod\nspec:\n\tcontainers: []\n"), "tabs.yaml:3:"},
		{write("noimage.yaml", "kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a}]}\n"), "Pod/p spec.containers[0]: no image"},
		{write("nospec.yaml", "---\nkind: Deployment\nmetadata: {name: d}\n"), "nospec.yaml:2: Deployment/d: no spec.template.spec"},
		{filepath.Dir(write("k1/kustomization.yaml", "resources: [missing.yaml]\n")), `resource "missing.yaml"`},
		{filepath.Dir(write("k2/kustomization.yaml", "resources: [https://github.com/x/y//base]\n")), "remote resource"},
		{filepath.Dir(write("k3/kustomization.yaml", "resources: [\n")), "k3/kustomization.yaml:"},
	} {
		found, err := Scan(tc.path, Limits{})
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v (found %v), want an error with %q", tc.path, err, found, tc.want)
		}
	}
}

func TestParseImageAndOverride(t *testing.T) {
	for in, want := range map[string]ImageRef{
		"busybox":                        {Host: "docker.io", Path: "library/busybox", Tag: "latest"},
		"reg.example.com:5000/team/a:v1": {Host: "reg.example.com:5000", Path: "team/a", Tag: "v1"},
		"localhost:5000/a@" + webDigest:  {Host: "localhost:5000", Path: "a", Digest: webDigest},
		"r.io/a:v1@" + webDigest:         {Host: "r.io", Path: "a", Tag: "v1", Digest: webDigest},
		"[::1]:5000/team/a:1":            {Host: "[::1]:5000", Path: "team/a", Tag: "1"},
	} {
		got, err := ParseImage(in)
		if err != nil || got != want {
			t.Errorf("%q: %+v %v, want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "team/UPPER", "a b", "{{ .Values.image }}"} {
		if _, err := ParseImage(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: %v", bad, err)
		}
	}
	for _, tc := range []struct {
		o        Override
		in, want string
	}{
		{Override{Name: "api", NewName: "r:5000/t/api", NewTag: "2"}, "api:1", "r:5000/t/api:2"},
		{Override{Name: "api", NewTag: "2"}, "api", "api:2"},
		{Override{Name: "api", Digest: webDigest}, "api:1", "api@" + webDigest},
		{Override{Name: "nginx", NewTag: "2"}, "docker.io/library/nginx:1", "docker.io/library/nginx:2"},
		{Override{Name: "r:5000/api", NewTag: "2"}, "r:5000/api:1@" + webDigest, "r:5000/api:2"},
		{Override{Name: "other", NewTag: "2"}, "api:1", "api:1"},
	} {
		if got, _ := tc.o.Apply(tc.in); got != tc.want {
			t.Errorf("%+v on %q: %q, want %q", tc.o, tc.in, got, tc.want)
		}
	}
}

// A path that is not there is named as given, without the prefix of a
// request error or the system call that failed on a parent directory.
func TestScanMissingPathNamesIt(t *testing.T) {
	p := filepath.Join(t.TempDir(), "gone", "app.yaml")
	_, err := Scan(p, Limits{MaxFileSize: 1 << 20})
	if want := "in-use scan: " + p + ": no such file or directory"; err == nil || err.Error() != want {
		t.Fatalf("Scan(%s) = %v, want %q", p, err, want)
	}
}
