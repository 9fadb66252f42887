package console_test

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/reclaim-registry/reclaim/registry/console"
)

// send makes a request to the console, with the operator's credentials
// unless anonymous, and returns the response and its body.
func send(t *testing.T, base, method, path string, form url.Values, anonymous bool, header http.Header) (*http.Response, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(t.Context(), method, base+console.Prefix+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if !anonymous {
		req.SetBasicAuth(user, password)
	}
	resp, b := fetch(t, req)
	return resp, string(b)
}

func TestConsoleHTTP(t *testing.T) {
	r := startRegistry(t)
	for _, path := range []string{"", "runs", "repositories", "retention", "trash", "runs/0123456789abcdef01234567"} {
		resp, _ := send(t, r.URL, http.MethodGet, path, nil, true, nil)
		if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("anonymous GET %s: %d, WWW-Authenticate %q; want 401 with a challenge", path, resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
		}
	}
	for path, form := range map[string]url.Values{"preview": {"repository": {"team/app"}}, "trash/restore": {"run": {"0123456789abcdef01234567"}}} {
		if resp, _ := send(t, r.URL, http.MethodPost, path, form, true, nil); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("anonymous POST %s: %d, want 401", path, resp.StatusCode)
		}
	}

	resp, body := send(t, r.URL, http.MethodGet, "", nil, false, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "Link database") {
		t.Fatalf("GET overview: %d\n%s", resp.StatusCode, body)
	}
	if got := resp.Header.Get("Content-Security-Policy"); got != console.CSP || !strings.Contains(got, "script-src 'self'") {
		t.Errorf("Content-Security-Policy %q", got)
	}
	if strings.Contains(body, "<script>") || strings.Contains(body, " style=") || strings.Contains(body, " onclick=") {
		t.Errorf("the page has inline script or style, which the CSP blocks:\n%s", body)
	}
	for path, ctype := range map[string]string{"static/console.css": "text/css", "static/console.js": "text/javascript"} {
		resp, _ := send(t, r.URL, http.MethodGet, path, nil, false, nil)
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), ctype) {
			t.Errorf("GET %s: %d %s", path, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
	}

	// A preview another site's page posts is refused; so is a GET.
	resp, _ = send(t, r.URL, http.MethodPost, "preview", url.Values{"repository": {"team/app"}}, false,
		http.Header{"Origin": {"https://evil.example"}})
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("cross-origin preview: %d, want 403", resp.StatusCode)
	}
	resp, _ = send(t, r.URL, http.MethodGet, "preview", nil, false, nil)
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET preview: %d, want 405", resp.StatusCode)
	}
	resp, body = send(t, r.URL, http.MethodPost, "preview", url.Values{"repository": {"nobody/here"}}, false, nil)
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(body, "repository not found") {
		t.Errorf("preview of a repository that does not exist: %d\n%s", resp.StatusCode, body)
	}
	resp, body = send(t, r.URL, http.MethodPost, "preview", url.Values{"repository": {`a<b>"c`}}, false, nil)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "a&lt;b&gt;") || strings.Contains(body, "a<b>") {
		t.Errorf("preview of a name with markup: %d, want 400 with the name escaped\n%s", resp.StatusCode, body)
	}
	resp, _ = send(t, r.URL, http.MethodGet, "runs/0123456789abcdef01234567", nil, false, nil)
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown run: %d, want 404", resp.StatusCode)
	}
}

// TestConsoleRepositoriesPages lists 150 repositories 100 a page: the
// second page starts right after the first, and they cover every name once.
func TestConsoleRepositoriesPages(t *testing.T) {
	r := startRegistry(t)
	root := filepath.Join(r.Root, "docker/registry/v2/repositories")
	var want []string
	for i := range 150 {
		name := fmt.Sprintf("org%d/repo%03d", i%3, i)
		want = append(want, name)
		if err := os.MkdirAll(filepath.Join(root, name, "_manifests", "revisions"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sort.Strings(want)
	repoRe := regexp.MustCompile(`<td class="repo" data-label="Repository">([^<]+)</td>`)
	nextRe := regexp.MustCompile(`rel="next" href="[^"]*\?last=([^"]+)"`)
	var got []string
	path := "repositories"
	for pages := 0; path != ""; pages++ {
		if pages > 2 {
			t.Fatal("more than two pages")
		}
		resp, body := send(t, r.URL, http.MethodGet, path, nil, false, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d", path, resp.StatusCode)
		}
		for _, m := range repoRe.FindAllStringSubmatch(body, -1) {
			got = append(got, m[1])
		}
		path = ""
		if m := nextRe.FindStringSubmatch(body); m != nil {
			last, err := url.QueryUnescape(m[1])
			if err != nil {
				t.Fatal(err)
			}
			path = "repositories?last=" + url.QueryEscape(last)
		}
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("pages list %d names:\n%v\nwant %d:\n%v", len(got), got, len(want), want)
	}
}
