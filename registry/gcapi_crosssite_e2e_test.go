package registry_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/registry/registrytest"
)

// Issue 25, finding 1: a page on another site, with an empty HTML form
// (method=post) pointed at the GC API, made the browser send a real
// collect with its cached basic-auth credentials.

// chromiumForm is what Chromium sends for a cross-site HTML form POST with
// no fields.
var chromiumForm = http.Header{
	"Content-Type":   {"application/x-www-form-urlencoded"},
	"Origin":         {"http://evil.example"},
	"Sec-Fetch-Site": {"cross-site"},
	"Sec-Fetch-Mode": {"navigate"},
	"Sec-Fetch-Dest": {"document"},
}

// sendHeader is g.send with request headers.
func (g *gcRegistry) sendHeader(t *testing.T, method, path, body string, h http.Header) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, g.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range h {
		req.Header[k] = vs
	}
	if g.Username != "" {
		req.SetBasicAuth(g.Username, g.Password)
	}
	code, _, b := roundTrip(t, req)
	return code, b
}

var jsonType = http.Header{"Content-Type": {"application/json"}}

// crossSiteScene is a registry with basic auth where every state-changing
// route has something to change: an untagged manifest a real collect
// deletes, a GC plan that deletes it, a pin and an in-use source.
type crossSiteScene struct {
	g      *gcRegistry
	repo   string
	old    digest.Digest // untagged, deletable
	kept   digest.Digest // tagged "keep", pinned, in use
	planID string
}

func newCrossSiteScene(t *testing.T) *crossSiteScene {
	t.Helper()
	g := startGC(t, registrytest.WithHtpasswd("admin", "secret"))
	s := &crossSiteScene{g: g, repo: "csrf/app"}
	s.old = deletable(t, g, s.repo)
	desc, err := remote.Head(g.Ref(t, s.repo+":keep"), g.Remote(t)...)
	if err != nil {
		t.Fatal(err)
	}
	s.kept = digest.Digest(desc.Digest.String())
	if code, b := g.sendHeader(t, http.MethodPut, "/gc/v1/repositories/csrf/app/pins/keep", `{"note":"prod"}`, jsonType); code != http.StatusCreated {
		t.Fatalf("pin: %d %s", code, b)
	}
	body := `{"images":[{"repository":"csrf/app","digest":"` + s.kept.String() + `"}]}`
	if code, b := g.sendHeader(t, http.MethodPut, "/gc/v1/inuse/sources/prod", body, jsonType); code != http.StatusOK {
		t.Fatalf("in-use source: %d %s", code, b)
	}
	s.planID = makePlan(t, g, s.repo)
	return s
}

// unchanged checks that nothing the refused requests could reach changed:
// the files in storage (the manifest's revision link, its layer links and
// blobs), the pin and the in-use source.
func (s *crossSiteScene) unchanged(t *testing.T, before string) {
	t.Helper()
	g := s.g
	if after := g.tree(t); after != before {
		t.Fatalf("storage changed:\n%s", diffLines(before, after))
	}
	if !stored(t, g, s.repo, s.old) {
		t.Fatalf("manifest %s deleted", s.old)
	}
	if code, b := g.sendHeader(t, http.MethodGet, "/gc/v1/repositories/csrf/app/pins/keep", "", nil); code != http.StatusOK {
		t.Fatalf("pin gone: %d %s", code, b)
	}
	if code, b := g.sendHeader(t, http.MethodGet, "/gc/v1/inuse/sources/prod", "", nil); code != http.StatusOK || !strings.Contains(string(b), s.kept.String()) {
		t.Fatalf("in-use source changed: %d %s", code, b)
	}
}

func wantCrossSite(t *testing.T, code int, b []byte) {
	t.Helper()
	if code != http.StatusForbidden {
		t.Fatalf("%d %s, want 403", code, b)
	}
	if c, _ := decodeErr(t, b); c != "CROSS_SITE_REQUEST" {
		t.Fatalf("code %s, want CROSS_SITE_REQUEST: %s", c, b)
	}
}

// Exactly what Chromium sends for a cross-site form POST, with the
// browser's cached credentials, to every route that changes state: each is
// a 403 CROSS_SITE_REQUEST and nothing changes.
func TestE2ECrossSiteFormRefused(t *testing.T) {
	s := newCrossSiteScene(t)
	g := s.g
	before := g.tree(t)
	for _, c := range []struct{ method, path string }{
		{http.MethodPost, "/gc/v1/repositories/csrf/app/collect?dry_run=false&untagged=delete"},
		{http.MethodPost, "/gc/v1/repositories/csrf/app/collect?dry_run=false&async=true"},
		{http.MethodPost, "/gc/v1/repositories/csrf/app/plan"},
		{http.MethodPost, "/gc/v1/repositories/csrf/app/plans/" + s.planID + "/apply?dry_run=false"},
		{http.MethodPost, "/gc/v1/repositories/csrf/app/retention/preview"},
		{http.MethodPost, "/gc/v1/repositories/csrf/app/retention/plans/0123456789abcdef01234567/apply"},
		{http.MethodPut, "/gc/v1/repositories/csrf/app/pins/keep"},
		{http.MethodDelete, "/gc/v1/repositories/csrf/app/pins/keep"},
		{http.MethodPut, "/gc/v1/inuse/sources/prod"},
		{http.MethodDelete, "/gc/v1/inuse/sources/prod"},
		// routes that answer 404 or 405 to anyone are refused the same
		{http.MethodPatch, "/gc/v1/repositories/csrf/app/collect"},
		{http.MethodPost, "/gc/v1/status"},
	} {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			code, b := g.sendHeader(t, c.method, c.path, "", chromiumForm)
			wantCrossSite(t, code, b)
		})
	}
	s.unchanged(t, before)
}

// Each thing a browser sends that gives another site's page away is
// enough on its own, to a real collect.
func TestE2ECrossSiteSignalsRefused(t *testing.T) {
	s := newCrossSiteScene(t)
	g := s.g
	before := g.tree(t)
	for _, c := range []struct {
		name   string
		header http.Header
		body   string
	}{
		{"Chromium form", chromiumForm, ""},
		{"Sec-Fetch-Site cross-site, JSON", http.Header{"Sec-Fetch-Site": {"cross-site"}, "Content-Type": {"application/json"}}, `{}`},
		{"Sec-Fetch-Site same-site", http.Header{"Sec-Fetch-Site": {"same-site"}, "Origin": {"http://other." + g.Host}}, ""},
		{"Origin of another site (no Sec-Fetch-Site)", http.Header{"Origin": {"http://evil.example"}}, ""},
		{"Origin null", http.Header{"Origin": {"null"}}, ""},
		{"Origin of the same host, other scheme", http.Header{"Origin": {"https://" + g.Host}}, ""},
		{"urlencoded form, no Origin", http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}, ""},
		{"multipart form, same origin", http.Header{"Sec-Fetch-Site": {"same-origin"}, "Content-Type": {"multipart/form-data; boundary=x"}}, "--x--\r\n"},
		{"text/plain (a no-cors fetch)", http.Header{"Content-Type": {"text/plain;charset=UTF-8"}}, `{"dry_run":false}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, b := g.sendHeader(t, http.MethodPost, "/gc/v1/repositories/csrf/app/collect?dry_run=false", c.body, c.header)
			wantCrossSite(t, code, b)
		})
	}
	s.unchanged(t, before)
}

// What is not a browser's cross-site request works as before: curl-like
// requests (no Origin, no Sec-Fetch-*, a JSON body or none), a browser on
// the registry's own origin, and reads from anywhere.
func TestE2ECrossSiteGuardPassesOthers(t *testing.T) {
	s := newCrossSiteScene(t)
	g := s.g
	for _, c := range []struct {
		name, method, path, body string
		header                   http.Header
		want                     int
	}{
		{"curl, no body", http.MethodPost, "/gc/v1/repositories/csrf/app/collect", "", nil, http.StatusOK},
		{"curl, JSON body", http.MethodPost, "/gc/v1/repositories/csrf/app/collect", `{"dry_run":true}`, jsonType, http.StatusOK},
		{"Go client, JSON body without Content-Type", http.MethodPost, "/gc/v1/repositories/csrf/app/plan", `{"cap":5}`, nil, http.StatusOK},
		{"curl, pin", http.MethodPut, "/gc/v1/repositories/csrf/app/pins/keep", `{"note":"again"}`, jsonType, http.StatusOK},
		{"old browser, own Origin", http.MethodPost, "/gc/v1/repositories/csrf/app/collect", "",
			http.Header{"Origin": {g.URL}}, http.StatusOK},
		{"read from another site", http.MethodGet, "/gc/v1/repositories/csrf/app/pins", "", chromiumForm, http.StatusOK},
		{"curl, unpin", http.MethodDelete, "/gc/v1/repositories/csrf/app/pins/keep", "", nil, http.StatusNoContent},
	} {
		t.Run(c.name, func(t *testing.T) {
			if code, b := g.sendHeader(t, c.method, c.path, c.body, c.header); code != c.want {
				t.Fatalf("%d %s, want %d", code, b, c.want)
			}
		})
	}
	if !stored(t, g, s.repo, s.old) {
		t.Fatal("a dry run deleted")
	}
	// A browser on the registry's own page (Sec-Fetch-Site: same-origin)
	// runs a real collect.
	code, b := g.sendHeader(t, http.MethodPost, "/gc/v1/repositories/csrf/app/collect?dry_run=false", "", http.Header{
		"Sec-Fetch-Site": {"same-origin"}, "Sec-Fetch-Mode": {"cors"}, "Sec-Fetch-Dest": {"empty"},
		"Origin": {g.URL}, "Content-Type": {"application/json"},
	})
	var rep struct {
		Deleted []digest.Digest `json:"manifests_deleted"`
	}
	if code != http.StatusOK || json.Unmarshal(b, &rep) != nil || !containsDigest(rep.Deleted, s.old) || stored(t, g, s.repo, s.old) {
		t.Fatalf("same-origin collect: %d %s", code, b)
	}
}
