package registry_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/distribution/distribution/v3/registry/auth"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// Regression tests for issue 16 (fail closed on every malformed request),
// through the real app on filesystem storage.

// send makes one GC API request with an optional body, as g's user (or as
// user:password when given).
func (g *gcRegistry) send(t testing.TB, method, path, body string, user ...string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, g.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	switch {
	case len(user) == 2:
		req.SetBasicAuth(user[0], user[1])
	case g.Username != "":
		req.SetBasicAuth(g.Username, g.Password)
	}
	return roundTrip(t, req)
}

// deletable pushes two images to repo, deletes the first one's tag and
// waits out the window: a real collection of repo deletes that manifest.
func deletable(t *testing.T, g *gcRegistry, repo string) digest.Digest {
	t.Helper()
	old := push(t, g, repo+":old", registrytest.Image(t, layer(t)))
	push(t, g, repo+":keep", registrytest.Image(t, layer(t)))
	untag(t, g, repo, "old")
	g.settle(t)
	return digest.Digest(old.String())
}

// stored reports whether manifest d of repo is still in storage: its
// revision link and its blob. It reads the raw driver, so it records no
// access (an HTTP GET would protect the manifest for a window).
func stored(t *testing.T, g *gcRegistry, repo string, d digest.Digest) bool {
	t.Helper()
	n := 0
	for _, p := range []string{layout.RevisionLinkPath(repo, d), layout.BlobDataPath(d)} {
		if _, err := g.raw.Stat(t.Context(), p); err == nil {
			n++
		}
	}
	return n == 2
}

// rejected sends each request and checks it is a 400 code that changed
// nothing in storage.
func rejected(t *testing.T, g *gcRegistry, code, method, path, body string) {
	t.Helper()
	before := g.tree(t)
	status, hdr, b := g.send(t, method, path, body)
	if status != http.StatusBadRequest {
		t.Errorf("%s %s %q: %d %s, want 400", method, path, body, status, b)
	} else if c, _ := decodeErr(t, b); c != code {
		t.Errorf("%s %s %q: code %s, want %s", method, path, body, c, code)
	}
	if hdr.Get("Retry-After") != "" {
		t.Errorf("%s %s: Retry-After on a request that can never succeed", method, path)
	}
	if after := g.tree(t); after != before {
		t.Fatalf("%s %s %q changed storage:\n%s", method, path, body, diffLines(before, after))
	}
}

// realRunStillDeletes is the control of the tests below: the manifest was
// deletable all along, so had a rejected request run, it would be gone.
// Without dry_run the request is a dry run; with dry_run=false it deletes.
func realRunStillDeletes(t *testing.T, g *gcRegistry, repo string, old digest.Digest) {
	t.Helper()
	before := g.tree(t)
	code, _, body := g.send(t, http.MethodPost, "/gc/v1/repositories/"+repo+"/collect", "")
	if code != http.StatusOK {
		t.Fatalf("collect without dry_run: %d %s", code, body)
	}
	if rep := decodeReport(t, body); !rep.DryRun || !containsDigest(rep.ManifestsDeleted, old) {
		t.Fatalf("collect without dry_run: dry_run=%v, would delete %v (want a dry run listing %s)", rep.DryRun, rep.ManifestsDeleted, old)
	}
	if after := g.tree(t); after != before {
		t.Fatalf("collect without dry_run changed storage:\n%s", diffLines(before, after))
	}
	code, _, body = g.send(t, http.MethodPost, "/gc/v1/repositories/"+repo+"/collect?dry_run=false", "")
	if code != http.StatusOK {
		t.Fatalf("collect?dry_run=false: %d %s", code, body)
	}
	if rep := decodeReport(t, body); rep.DryRun || !containsDigest(rep.ManifestsDeleted, old) || stored(t, g, repo, old) {
		t.Fatalf("collect?dry_run=false did not delete %s: %+v", old, rep.ManifestsDeleted)
	}
	g.checkLinks(t)
}

func containsDigest(ds []digest.Digest, d digest.Digest) bool {
	for _, x := range ds {
		if x == d {
			return true
		}
	}
	return false
}

// makePlan stores a plan for repo and returns its id.
func makePlan(t *testing.T, g *gcRegistry, repo string, user ...string) string {
	t.Helper()
	code, _, body := g.send(t, http.MethodPost, "/gc/v1/repositories/"+repo+"/plan", "", user...)
	if code != http.StatusOK {
		t.Fatalf("plan %s: %d %s", repo, code, body)
	}
	var resp struct {
		Plan struct {
			ID string `json:"plan_id"`
		} `json:"plan"`
	}
	if err := json.Unmarshal(body, &resp); err != nil || resp.Plan.ID == "" {
		t.Fatalf("plan %s: %v %s", repo, err, body)
	}
	return resp.Plan.ID
}

// Finding 1: a query the parser cannot read used to be dropped pair by pair
// (r.URL.Query()), and no dry_run meant a real run: these deleted data.
func TestE2EMalformedQueryDeletesNothing(t *testing.T) {
	g := startGC(t)
	const repo = "semi/app"
	old := deletable(t, g, repo)
	plan := makePlan(t, g, repo)
	for _, q := range []string{
		"dry_run=tru%e",
		"dry_run=true;",
		"dry_run=false;",
		"dry_run=true;dry_run=false",
		"cap=%zz&dry_run=true",
		"dry_run=1",
		"dry_run=TRUE",
		"dry_run=",
		"dry_run",
		"dry_run=true&dry_run=false",
		"dry_run=true&force=1",
		"DRY_RUN=true",
		"async=true&dry_run=tru%e",
	} {
		t.Run(q, func(t *testing.T) {
			rejected(t, g, "PARAM_INVALID", http.MethodPost, "/gc/v1/repositories/"+repo+"/collect?"+q, "")
			rejected(t, g, "PARAM_INVALID", http.MethodPost, "/gc/v1/repositories/"+repo+"/plans/"+plan+"/apply?"+q, "")
			if !stored(t, g, repo, old) {
				t.Fatalf("the untagged manifest %s was deleted", old)
			}
		})
	}
	realRunStillDeletes(t, g, repo, old)
}

// Finding 2: the body was decoded leniently: any case, last duplicate
// wins, trailing data ignored.
func TestE2EMalformedBodyDeletesNothing(t *testing.T) {
	g := startGC(t)
	const repo = "semi/body"
	old := deletable(t, g, repo)
	for _, tc := range []struct{ name, query, body string }{
		{"case variant", "", `{"dry_run":true,"DRY_RUN":false}`},
		{"duplicate", "", `{"dry_run":true,"dry_run":false}`},
		{"trailing garbage", "", `{"dry_run":true} garbage`},
		{"trailing object", "", `{"dry_run":true}{"dry_run":false}`},
		{"unknown field", "", `{"dry_run":true,"force":true}`},
		{"string value", "", `{"dry_run":"true"}`},
		{"null value", "", `{"dry_run":null}`},
		{"not an object", "", `[{"dry_run":true}]`},
		{"query and body disagree", "dry_run=true", `{"dry_run":false}`},
		{"query and body both say it", "dry_run=false", `{"dry_run":false}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := "/gc/v1/repositories/" + repo + "/collect"
			if tc.query != "" {
				path += "?" + tc.query
			}
			rejected(t, g, "PARAM_INVALID", http.MethodPost, path, tc.body)
			if !stored(t, g, repo, old) {
				t.Fatalf("the untagged manifest %s was deleted", old)
			}
		})
	}
	// The body alone can ask for a real run, when it says so once.
	code, _, body := g.send(t, http.MethodPost, "/gc/v1/repositories/"+repo+"/collect", `{"dry_run":false}`)
	if rep := decodeReport(t, body); code != http.StatusOK || rep.DryRun || !containsDigest(rep.ManifestsDeleted, old) {
		t.Fatalf("body dry_run false: %d %s", code, body)
	}
}

// A collect or apply that does not say dry_run is a dry run.
func TestE2ECollectDefaultsToDryRun(t *testing.T) {
	g := startGC(t)
	const repo = "semi/default"
	old := deletable(t, g, repo)
	plan := makePlan(t, g, repo)
	before := g.tree(t)
	for _, path := range []string{"/collect", "/collect?async=false", "/collect?untagged=delete", "/plans/" + plan + "/apply"} {
		code, _, body := g.send(t, http.MethodPost, "/gc/v1/repositories/"+repo+path, "")
		if code != http.StatusOK {
			t.Fatalf("%s: %d %s", path, code, body)
		}
		if rep := decodeReport(t, body); !rep.DryRun {
			t.Fatalf("%s: a real run", path)
		}
	}
	if after := g.tree(t); after != before || !stored(t, g, repo, old) {
		t.Fatalf("requests without dry_run changed storage:\n%s", diffLines(before, after))
	}
	code, _, body := g.send(t, http.MethodPost, "/gc/v1/repositories/"+repo+"/plans/"+plan+"/apply?dry_run=false", "")
	if rep := decodeReport(t, body); code != http.StatusOK || rep.DryRun || !containsDigest(rep.ManifestsDeleted, old) {
		t.Fatalf("apply?dry_run=false: %d %s", code, body)
	}
}

// Finding 3: "localhost:5000/a" is a valid reference, but no driver stores
// ':' in a path, so no repository has that name; it answered 503
// storage_unreadable with Retry-After, a retry that can never succeed.
// Every route that takes a name answers 400 NAME_INVALID.
func TestE2EUnstorableNameIsInvalid(t *testing.T) {
	g := startGC(t)
	push(t, g, "a:v1", registrytest.Image(t, layer(t)))
	for _, name := range []string{"localhost:5000/a", "localhost:5000/a/b", "127.0.0.1:5000/a", "[::1]/a", "[::1]:5000/a"} {
		t.Run(name, func(t *testing.T) {
			for _, route := range []string{"/collect?dry_run=true", "/collect?dry_run=false", "/plan",
				"/plans/0123456789abcdef01234567/apply?dry_run=false"} {
				rejected(t, g, "NAME_INVALID", http.MethodPost, "/gc/v1/repositories/"+name+route, "")
			}
		})
	}
	// The same names without the port are repositories like any other.
	for _, name := range []string{"localhost/a", "example.com/a"} {
		code, _, body := g.send(t, http.MethodPost, "/gc/v1/repositories/"+name+"/collect?dry_run=true", "")
		if code != http.StatusNotFound {
			t.Fatalf("%s: %d %s, want 404 NAME_UNKNOWN", name, code, body)
		}
	}
}

// Finding 3, second half: a valid name with no repository is a 404 before
// any precondition, here a recording epoch younger than the window (which
// would be a 503 that says retry).
func TestE2EUnknownRepositoryBeforePreconditions(t *testing.T) {
	r := registrytest.Start(t, registrytest.WithStorageMiddleware("reclaim", reclaimOptions(t, time.Hour, "")))
	g := &gcRegistry{Registry: r, raw: rawDriver(t, r)}
	push(t, g, "young/app:v1", registrytest.Image(t, layer(t)))
	for _, route := range []string{"/collect?dry_run=true", "/collect?dry_run=false", "/plan",
		"/plans/0123456789abcdef01234567/apply?dry_run=false"} {
		code, hdr, body := g.send(t, http.MethodPost, "/gc/v1/repositories/no/such/app"+route, "")
		if c, _ := decodeErr(t, body); code != http.StatusNotFound || c != "NAME_UNKNOWN" || hdr.Get("Retry-After") != "" {
			t.Errorf("%s: %d %s (Retry-After %q), want 404 NAME_UNKNOWN", route, code, body, hdr.Get("Retry-After"))
		}
	}
	// Control: the repository that exists gets the precondition's answer:
	// a real run is refused, a preview plans and lists the blocker.
	assertBlocked(t, g, "young/app", "redis_recording_too_short")
}

// repoACL is an access controller for the tests below: basic auth, any
// password "pw"; user "admin" may do anything, any other user only acts on
// repositories under "<user>/".
type repoACL struct{}

type basicChallenge struct{}

func (basicChallenge) Error() string { return "access denied" }
func (basicChallenge) SetHeaders(_ *http.Request, w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Basic realm="gctest"`)
}

func (repoACL) Authorized(r *http.Request, access ...auth.Access) (*auth.Grant, error) {
	user, pw, ok := r.BasicAuth()
	if !ok || pw != "pw" {
		return nil, basicChallenge{}
	}
	for _, a := range access {
		if user != "admin" && !strings.HasPrefix(a.Name, user+"/") {
			return nil, basicChallenge{}
		}
	}
	return &auth.Grant{User: auth.UserInfo{Name: user}}, nil
}

func init() {
	_ = auth.Register("gcrepoacl", func(map[string]any) (auth.AccessController, error) { return repoACL{}, nil })
}

// Finding 4: a plan or run id of a repository the caller may not use
// answers exactly as an unknown id does: 404, the same body, no name.
// Before, applying bob's plan to alice's repository answered 409 naming
// bob/app, and reading bob's plan or run answered 401 where an unknown id
// answered 404.
func TestE2EForeignIDsLookUnknown(t *testing.T) {
	g := startGC(t, registrytest.WithConfig(func(c *configuration.Configuration) {
		c.Auth = configuration.Auth{"gcrepoacl": configuration.Parameters{}}
	}))
	admin := []string{"admin", "pw"}
	alice := []string{"alice", "pw"}
	adminRemote := []remote.Option{remote.WithAuth(&authn.Basic{Username: "admin", Password: "pw"}), remote.WithContext(t.Context())}
	for _, repo := range []string{"alice/app", "bob/app"} {
		for _, tag := range []string{"old", "keep"} {
			if err := remote.Write(g.Ref(t, repo+":"+tag), registrytest.Image(t, layer(t)), adminRemote...); err != nil {
				t.Fatal(err)
			}
		}
		code, _, body := g.send(t, http.MethodDelete, "/v2/"+repo+"/manifests/old", "", admin...)
		if code != http.StatusAccepted {
			t.Fatalf("untag %s: %d %s", repo, code, body)
		}
	}
	g.settle(t)
	bobPlan := makePlan(t, g, "bob/app", admin...)
	alicePlan := makePlan(t, g, "alice/app", alice...)
	code, _, body := g.send(t, http.MethodPost, "/gc/v1/repositories/bob/app/collect?dry_run=true", "", admin...)
	if code != http.StatusOK {
		t.Fatalf("bob's run: %d %s", code, body)
	}
	bobRun := decodeReport(t, body).RunID
	const unknown = "ffffffffffffffffffffffff"

	// What alice gets for an id, with the id itself masked out (the answer
	// may echo what she sent, nothing else).
	as := func(user []string, method, path, id string) (int, string) {
		code, hdr, body := g.send(t, method, strings.ReplaceAll(path, "ID", id), "", user...)
		if hdr.Get("WWW-Authenticate") != "" {
			t.Errorf("%s %s: a challenge for an authenticated caller", method, path)
		}
		return code, strings.ReplaceAll(string(body), id, "ID")
	}
	before := g.tree(t)
	for _, tc := range []struct{ method, path, foreign string }{
		{http.MethodPost, "/gc/v1/repositories/alice/app/plans/ID/apply?dry_run=false", bobPlan},
		{http.MethodPost, "/gc/v1/repositories/alice/app/collect?dry_run=false&plan=ID", bobPlan},
		{http.MethodPost, "/gc/v1/repositories/alice/app/collect?async=true&dry_run=false&plan=ID", bobPlan},
		{http.MethodGet, "/gc/v1/plans/ID", bobPlan},
		{http.MethodGet, "/gc/v1/runs/ID", bobRun},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			fc, fb := as(alice, tc.method, tc.path, tc.foreign)
			uc, ub := as(alice, tc.method, tc.path, unknown)
			if fc != http.StatusNotFound || fc != uc || fb != ub {
				t.Fatalf("foreign id: %d %s\nunknown id: %d %s", fc, fb, uc, ub)
			}
			if strings.Contains(fb, "bob") {
				t.Fatalf("the answer names the other repository: %s", fb)
			}
		})
	}
	if after := g.tree(t); after != before {
		t.Fatalf("storage changed:\n%s", diffLines(before, after))
	}
	// Controls: the ids exist, and their owners can use them.
	if c, b := as(admin, http.MethodGet, "/gc/v1/plans/ID", bobPlan); c != http.StatusOK {
		t.Fatalf("admin reads bob's plan: %d %s", c, b)
	}
	if c, b := as(admin, http.MethodGet, "/gc/v1/runs/ID", bobRun); c != http.StatusOK {
		t.Fatalf("admin reads bob's run: %d %s", c, b)
	}
	if c, b := as(alice, http.MethodGet, "/gc/v1/plans/ID", alicePlan); c != http.StatusOK {
		t.Fatalf("alice reads her plan: %d %s", c, b)
	}
	if c, b := as(alice, http.MethodPost, "/gc/v1/repositories/alice/app/plans/ID/apply?dry_run=false", alicePlan); c != http.StatusOK {
		t.Fatalf("alice applies her plan: %d %s", c, b)
	}
}
