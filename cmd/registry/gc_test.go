package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/spf13/cobra"

	"github.com/reclaim-registry/reclaim/gc"
	"github.com/reclaim-registry/reclaim/gc/collector"
	"github.com/reclaim-registry/reclaim/reclaim"
)

// runGC runs `gc <args>` against srv and returns stdout, stderr and the
// exit code the command asked for (0 when it did not exit).
func runGC(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	return runCommand(t, newGCCommand(), "", args...)
}

// runCommand runs cmd with stdin and args and returns stdout, stderr and
// the exit code the command asked for (0 when it did not exit).
func runCommand(t *testing.T, cmd *cobra.Command, stdin string, args ...string) (string, string, int) {
	t.Helper()
	code := 0
	exit = func(c int) { code = c }
	t.Cleanup(func() { exit = func(int) {} })
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetIn(strings.NewReader(stdin))
	cmd.SetArgs(args)
	if err := cmd.Execute(); err != nil && code == 0 {
		code = gcExitCode(err)
	}
	return out.String(), errOut.String(), code
}

func sampleReport(dry bool) collector.Report {
	d := digest.FromString("m")
	return collector.Report{RunID: "r1", Repository: "team/app", DryRun: dry, Status: "done",
		ManifestsDeleted: []digest.Digest{d}, LayersUnlinked: []digest.Digest{digest.FromString("l")},
		BlobsDeleted: []digest.Digest{d, digest.FromString("l")}, BytesFreed: 3 << 20,
		Kept:   []gc.Decision{{Kind: reclaim.KindManifest, Digest: digest.FromString("k"), Reason: reclaim.ReasonTagged}},
		Errors: []gc.Decision{}, Timings: collector.Timings{TotalMS: 12}}
}

func TestGCCollectCLI(t *testing.T) {
	var got *http.Request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r
		switch {
		case strings.Contains(r.URL.Path, "/busy/"):
			w.WriteHeader(http.StatusConflict)
			w.Write([]byte(`{"errors":[{"code":"GC_BUSY","message":"busy"}]}`))
		case strings.Contains(r.URL.Path, "/down/"):
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"errors":[{"code":"GC_ABORTED","message":"aborted","detail":{"reason":"redis_unavailable"}}]}`))
		case strings.Contains(r.URL.Path, "/BAD/"):
			w.WriteHeader(http.StatusBadRequest)
			w.Write([]byte(`{"errors":[{"code":"NAME_INVALID","message":"bad name"}]}`))
		case strings.Contains(r.URL.Path, "/secret/"):
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`))
		case strings.Contains(r.URL.Path, "/partial/"):
			rep := sampleReport(false)
			rep.Errors = []gc.Decision{{Kind: reclaim.KindBlob, Digest: digest.FromString("x"), Reason: reclaim.ReasonDeleteFailed, Detail: "disk on fire"}}
			json.NewEncoder(w).Encode(rep)
		default:
			json.NewEncoder(w).Encode(sampleReport(r.URL.Query().Get("dry_run") == "true"))
		}
	}))
	defer srv.Close()

	out, _, code := runGC(t, "collect", "team/app", "--dry-run", "--url", srv.URL, "--user", "admin:pw", "--cap", "5")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	if got.Method != http.MethodPost || got.URL.Path != "/gc/v1/repositories/team/app/collect" ||
		!slices.Equal(got.URL.Query()["dry_run"], []string{"true"}) || got.URL.Query().Get("cap") != "5" {
		t.Fatalf("request %s %s", got.Method, got.URL)
	}
	if u, p, ok := got.BasicAuth(); !ok || u != "admin" || p != "pw" {
		t.Fatal("basic auth not sent")
	}
	for _, want := range []string{"dry run: nothing deleted", "manifests to delete:", "3.0 MiB", "tagged 1"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}

	out, _, code = runGC(t, "collect", "team/app", "--json", "--url", srv.URL, "--token", "tok")
	var rep collector.Report
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || rep.RunID != "r1" {
		t.Fatalf("--json: exit %d %q", code, out)
	}
	if got.Header.Get("Authorization") != "Bearer tok" {
		t.Fatal("token not sent")
	}
	// The API's default is a dry run: a real run must say so.
	if !slices.Equal(got.URL.Query()["dry_run"], []string{"false"}) {
		t.Fatalf("a real run sent %q; want dry_run=false spelled out", got.URL.RawQuery)
	}
	runGC(t, "collect", "team/app", "--plan", "0123456789abcdef01234567", "--url", srv.URL)
	if q := got.URL.Query(); !slices.Equal(q["dry_run"], []string{"false"}) || q.Get("plan") != "0123456789abcdef01234567" {
		t.Fatalf("applying a plan sent %q", got.URL.RawQuery)
	}

	for repo, want := range map[string]int{"busy/x": exitRetry, "down/x": exitRetry, "BAD/x": exitRejected,
		"secret/x": exitAuth, "partial/x": exitPartially} {
		_, stderr, code := runGC(t, "collect", repo, "--url", srv.URL)
		if code != want {
			t.Errorf("%s: exit %d, want %d (%s)", repo, code, want, stderr)
		}
	}
	if _, stderr, code := runGC(t, "collect", "down/x", "--url", srv.URL); !strings.Contains(stderr, "redis_unavailable") || code != exitRetry {
		t.Errorf("abort reason not shown: %q", stderr)
	}
	if _, _, code := runGC(t, "collect", "x", "--url", "not a url"); code != exitFailure {
		t.Errorf("bad url: exit %d", code)
	}
}

// A 401 says which of three things is wrong: nothing sent, refused, or the
// scope the request needed (named by a token challenge's insufficient_scope).
func TestGCCollectCLIUnauthorized(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/scoped/") {
			w.Header().Set("WWW-Authenticate", `Bearer realm="https://auth.example.com/token",service="registry",scope="registry:gc:* repository:scoped/x:delete",error="insufficient_scope"`)
		}
		w.WriteHeader(http.StatusUnauthorized)
		w.Write([]byte(`{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`))
	}))
	defer srv.Close()
	for _, c := range []struct {
		repo string
		args []string
		want string
	}{
		{"secret/x", nil, "no credentials sent"},
		{"secret/x", []string{"--token", "t"}, "refused these credentials"},
		{"scoped/x", []string{"--token", "t"}, "lack the scope registry:gc:* repository:scoped/x:delete"},
	} {
		_, stderr, code := runGC(t, append([]string{"collect", c.repo, "--url", srv.URL}, c.args...)...)
		if code != exitAuth || !strings.Contains(stderr, c.want) {
			t.Errorf("%s %v: exit %d %q, want %d saying %q", c.repo, c.args, code, stderr, exitAuth, c.want)
		}
	}
}

// A preview a blocker would abort prints the plan and the blocker, and
// exits 4 like the refused real run.
func TestGCCollectCLIBlockedPreview(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rep := sampleReport(true)
		until := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		rep.Blockers = []collector.Blocker{{Reason: reclaim.AbortRedisRecordingTooShort, Blocks: collector.BlocksRun, Detail: "recording since", Until: &until}}
		json.NewEncoder(w).Encode(rep)
	}))
	defer srv.Close()
	out, _, code := runGC(t, "collect", "young/x", "--dry-run", "--url", srv.URL)
	if code != exitRetry || !strings.Contains(out, "blocked (run): redis_recording_too_short until ") ||
		!strings.Contains(out, "manifests to delete:   1") {
		t.Errorf("blocked preview: exit %d\n%s", code, out)
	}
}

func TestHumanBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1536: "1.5 KiB (1536 bytes)", 5 << 30: "5.0 GiB (5368709120 bytes)"} {
		if got := humanBytes(n); got != want {
			t.Errorf("%d: %q, want %q", n, got, want)
		}
	}
}
