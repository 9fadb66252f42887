package registry

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/reclaim/trashentry"
	"github.com/reclaim-registry/reclaim/trash"
)

// The console's Trash page needs the catalog access; a restore from it,
// what the GC API's restore needs: delete on every repository it writes
// to, asked after the caller is known and before anything is written, and
// only from the console's own pages.
func TestConsoleTrashAccess(t *testing.T) {
	s, get := consoleServer(t, map[string]any{"window": "1s", "dedup": "10ms", "gc": map[string]any{"enabled": true},
		"trash": map[string]any{"keep": "1h"}})
	held := map[string]trashentry.Entry{}
	for repo, run := range map[string]string{"team/app": teamRun, "other/app": otherRun} {
		e, err := s.trash.Hold(t.Context(), trashentry.Entry{Kind: reclaim.KindManifest, Repo: repo, Run: run,
			Digest: digest.FromString(repo), Size: 10, Reason: "unreferenced", By: "gc"})
		if err != nil {
			t.Fatal(err)
		}
		held[repo] = e
	}
	const catalog, teamDelete = "registry:catalog:*", "repository:team/app:delete"
	for _, tc := range []struct {
		grant string
		want  int
	}{{"", http.StatusUnauthorized}, {teamDelete, http.StatusUnauthorized}, {catalog, http.StatusOK}} {
		resp, body := get(http.MethodGet, "trash", tc.grant, nil)
		if resp.StatusCode != tc.want || tc.want == http.StatusOK && (!strings.Contains(body, "team/app") || !strings.Contains(body, "other/app")) {
			t.Errorf("GET trash with %q: %d, want %d\n%.300s", tc.grant, resp.StatusCode, tc.want, body)
		}
	}
	team := url.Values{"repository": {"team/app"}, "digest": {held["team/app"].Digest.String()}}
	for _, tc := range []struct {
		grant string
		form  url.Values
		want  int
	}{
		{"", team, http.StatusUnauthorized},
		{catalog, team, http.StatusUnauthorized},
		{teamDelete, url.Values{"run": {otherRun}}, http.StatusUnauthorized},
		{teamDelete, url.Values{"repository": {"other/app"}, "digest": {held["other/app"].Digest.String()}}, http.StatusUnauthorized},
		{teamDelete, url.Values{"repository": {"team/app"}}, http.StatusBadRequest},
	} {
		if resp, body := get(http.MethodPost, "trash/restore", tc.grant, tc.form); resp.StatusCode != tc.want {
			t.Errorf("restore %v with %q: %d, want %d\n%.300s", tc.form, tc.grant, resp.StatusCode, tc.want, body)
		}
	}
	if entries, err := s.trash.List(t.Context(), trash.Filter{}); err != nil || len(entries) != 2 {
		t.Fatalf("after refused restores the trash holds %d entries (%v); want both", len(entries), err)
	}
	// allowed: the restore runs, and says what became of the entry (its
	// manifest was never stored: nothing to put back)
	resp, body := get(http.MethodPost, "trash/restore", teamDelete, url.Values{"run": {teamRun}})
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "purged: data gone") || !strings.Contains(body, "1 left in the trash") {
		t.Errorf("restore of team/app's run with delete on it: %d\n%s", resp.StatusCode, body)
	}
}
