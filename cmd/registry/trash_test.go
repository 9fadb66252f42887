package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/gc/collector"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/reclaim/trashentry"
	"github.com/reclaim-registry/reclaim/registry"
	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/storage/linkdb"
)

func runTrash(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	return runCommand(t, newTrashCommand(), "", args...)
}

// startCLITrash starts a registry with GC on, the trash keeping entries
// for an hour, and a complete link database (so a collect's blobs go to
// the trash, not kept as linkdb_incomplete).
func startCLITrash(t *testing.T) *registrytest.Registry {
	r := registrytest.Start(t, registrytest.WithStorageMiddleware("reclaim", map[string]any{
		"window": "1s", "dedup": "10ms", "gc": map[string]any{"enabled": true}, "trash": map[string]any{"keep": "1h"}}))
	raw, err := filesystem.FromParameters(map[string]any{"rootdirectory": r.Root})
	if err != nil {
		t.Fatal(err)
	}
	if err := linkdb.MarkLinkDBComplete(t.Context(), raw, time.Now()); err != nil {
		t.Fatal(err)
	}
	return r
}

// cliCollect ages r past its window and collects repo, returning the report.
func cliCollect(t *testing.T, r *registrytest.Registry, repo string) collector.Report {
	t.Helper()
	r.Age(t, 2*time.Second)
	out, errOut, code := runGC(t, "collect", repo, "--url", r.URL, "--json")
	var rep collector.Report
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil {
		t.Fatalf("collect: exit %d\n%s\n%s", code, out, errOut)
	}
	return rep
}

// A collect moves an untagged image to the trash; list shows its entries,
// restore --run brings it back so it pulls, and purge frees what a second
// collect put there.
func TestTrashListRestorePurge(t *testing.T) {
	r := startCLITrash(t)
	repo := "cli/app"
	old := registrytest.PushImage(t, r, repo+":v1", 1)
	oldD, _ := old.Digest()
	registrytest.PushImage(t, r, repo+":v1", 1) // v1 moves: old is untagged

	rep := cliCollect(t, r, repo)
	if len(rep.ManifestsDeleted) != 1 || len(rep.BlobsInTrash) == 0 || rep.BytesFreed != 0 {
		t.Fatalf("collect with the trash on: %+v", rep)
	}
	out, errOut, code := runTrash(t, "list", "--url", r.URL, "--repository", repo)
	if code != 0 || !strings.Contains(out, "REPOSITORY") || !strings.Contains(out, rep.RunID) ||
		!strings.Contains(out, shortDigest(oldD.String())) || !regexp.MustCompile(`\n3 entries, \d+(\.\d)? [KMG]?i?B held; entries are kept 1h0m0s\n$`).MatchString(out) {
		t.Fatalf("list: exit %d\n%s\n%s", code, out, errOut)
	}
	out, _, code = runTrash(t, "list", "--url", r.URL, "--run", rep.RunID, "--json", "--since", "1h")
	var l trashListing
	if code != 0 || json.Unmarshal([]byte(out), &l) != nil || l.Total != 3 || len(l.Entries) != 3 || l.KeepSeconds != 3600 {
		t.Fatalf("list --json: exit %d\n%s", code, out)
	}
	if registrytest.ManifestStatus(t, r, repo+"@"+oldD.String()) != http.StatusNotFound {
		t.Fatal("the collected manifest still answers")
	}

	out, errOut, code = runTrash(t, "restore", "--url", r.URL, "--run", rep.RunID)
	if code != 0 || !strings.HasPrefix(out, "restored 3, left 0\n") || strings.Count(out, "  restored ") != 3 {
		t.Fatalf("restore: exit %d\n%s\n%s", code, out, errOut)
	}
	registrytest.AssertPullable(t, r, repo+"@"+oldD.String())
	if out, _, _ := runTrash(t, "list", "--url", r.URL); !strings.HasSuffix(out, "0 entries, 0 B held; entries are kept 1h0m0s\n") {
		t.Fatalf("after the restore:\n%s", out)
	}

	// Still untagged: the next collect moves it to the trash again.
	rep = cliCollect(t, r, repo)
	if len(rep.BlobsInTrash) == 0 {
		t.Fatalf("second collect: %+v", rep)
	}
	r.Age(t, 2*time.Second) // purge deletes nothing accessed within the window
	out, errOut, code = runTrash(t, "purge", "--url", r.URL, "--older-than", "0s")
	want := "purged 3 entries, freed " + humanBytes(rep.BytesInTrash) + " (" + strconv.Itoa(len(rep.BlobsInTrash)) + " blobs)\n"
	if code != 0 || out != want {
		t.Fatalf("purge: exit %d\n%q\nwant %q\n%s", code, out, want, errOut)
	}
	if code := registrytest.ManifestStatus(t, r, repo+"@"+oldD.String()); code != http.StatusNotFound {
		t.Fatalf("after the purge the manifest answers %d", code)
	}
	if out, _, code = runTrash(t, "restore", "--url", r.URL, "--run", rep.RunID); code != 0 || out != "restored 0, left 0\n" {
		t.Fatalf("restore after the purge: exit %d\n%s", code, out)
	}
}

// The requests the commands send, and the exit codes of the answers
// they get: the trash off is a rejected request (2), a missing
// --older-than a usage error (1), a failed restore entry 5.
func TestTrashCLIRequests(t *testing.T) {
	var got *http.Request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r
		switch {
		case r.URL.Query().Get("run") == "off":
			w.WriteHeader(http.StatusMethodNotAllowed)
			w.Write([]byte(`{"errors":[{"code":"UNSUPPORTED","message":"the trash is off: set trash.keep in the reclaim storage middleware options"}]}`))
		case r.URL.Query().Get("run") == "secret":
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`))
		case r.URL.Path == "/gc/v1/trash/restore":
			w.Write([]byte(`{"entries":[{"entry":{"id":"1-ab","kind":"tag","repository":"team/app","tag":"v1","digest":"sha256:` +
				strings.Repeat("a", 64) + `","reason":"retention","by":"retention","removed":"2026-12-01T00:00:00Z","expires":"2026-12-08T00:00:00Z"},` +
				`"outcome":"failed","detail":"write tag: disk on fire"}],"restored":0,"left":1}`))
		default:
			w.Write([]byte(`{"entries":[],"bytes_freed":0,"blobs_freed":0}`))
		}
	}))
	defer srv.Close()

	if _, errOut, code := runTrash(t, "list", "--url", srv.URL, "--run", "off"); code != exitRejected || !strings.Contains(errOut, "the trash is off") {
		t.Errorf("trash off: exit %d %q", code, errOut)
	}
	if _, errOut, code := runTrash(t, "list", "--url", srv.URL, "--run", "secret"); code != exitAuth || !strings.Contains(errOut, "no credentials sent") {
		t.Errorf("401: exit %d %q", code, errOut)
	}
	runTrash(t, "list", "--url", srv.URL, "--repository", "team/app", "--tag", "v1", "--until", "2026-12-01T00:00:00Z", "--limit", "5")
	if q := got.URL.Query(); got.URL.Path != "/gc/v1/trash" || q.Get("repository") != "team/app" || q.Get("tag") != "v1" ||
		q.Get("until") != "2026-12-01T00:00:00Z" || q.Get("limit") != "5" || len(q) != 4 {
		t.Errorf("list sent %s %s", got.Method, got.URL)
	}
	if _, errOut, code := runTrash(t, "list", "--url", srv.URL, "--since", "yesterday"); code != exitFailure || !strings.Contains(errOut, "--since") {
		t.Errorf("bad --since: exit %d %q", code, errOut)
	}
	out, errOut, code := runTrash(t, "restore", "--url", srv.URL, "--plan", "p1", "--token", "tok")
	if code != exitPartially || got.Method != http.MethodPost || got.URL.RawQuery != "plan=p1" || got.Header.Get("Authorization") != "Bearer tok" ||
		!strings.Contains(out, "failed        tag        team/app :v1 (sha256:aaaaaaaaaaaa): write tag: disk on fire") {
		t.Errorf("restore: exit %d %s %s\n%s%s", code, got.Method, got.URL, out, errOut)
	}
	if _, _, code := runTrash(t, "purge", "--url", srv.URL); code != exitFailure {
		t.Errorf("purge without --older-than: exit %d", code)
	}
	if out, _, code := runTrash(t, "purge", "--url", srv.URL, "--older-than", "72h"); code != 0 || got.URL.RawQuery != "older_than=72h0m0s" ||
		out != "purged 0 entries, freed 0 B (0 blobs)\n" {
		t.Errorf("purge: exit %d %s %q", code, got.URL, out)
	}
}

// With the trash on, a collect's summary says what it held instead of
// freeing, so "bytes freed: 0 B" is not the whole story.
func TestGCSummaryShowsTheTrash(t *testing.T) {
	rep := sampleReport(false)
	until := time.Date(2026, 12, 13, 3, 0, 0, 0, time.UTC)
	rep.BlobsDeleted, rep.BytesFreed = nil, 0
	rep.BlobsInTrash, rep.BytesInTrash, rep.RestorableUntil = rep.ManifestsDeleted, 2048, &until
	var out strings.Builder
	writeSummary(&out, &rep, false)
	for _, want := range []string{"bytes freed:           0 B\n", "blobs in the trash:    1\n",
		"bytes in the trash:    2.0 KiB (2048 bytes), restorable until " + until.Local().Format(time.RFC3339) + "\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
}

// `registry trash reindex` on a storage whose holds the index lost (its
// embedded Redis went with the process): every hold is indexed again.
func TestTrashReindexCommand(t *testing.T) {
	cfg := writeBadConfig(t, "trash:\n          keep: 168h")
	conf, err := readConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := registry.New(t.Context(), conf)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, err := srv.Trash().Hold(t.Context(), trashentry.Entry{Kind: reclaim.KindLayerLink, Repo: "a/b", Digest: digest.FromString(strconv.Itoa(i))}); err != nil {
			t.Fatal(err)
		}
	}
	srv.Close()
	out, errOut, code := runTrash(t, "reindex", cfg)
	if code != 0 || !strings.Contains(out, "2 entries indexed") {
		t.Fatalf("reindex: exit %d\n%s\n%s", code, out, errOut)
	}
	if out, _, code := runTrash(t, "reindex", writeBadConfig(t, "gc:\n          enabled: true")); code == 0 {
		t.Fatalf("reindex with the trash off: exit 0\n%s", out)
	}
}
