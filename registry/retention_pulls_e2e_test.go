package registry_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/retention"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

// startPulls starts a registry that records pulls for pulled_within and
// ignores those of Trivy (by user agent) and of the account "scanner".
func startPulls(t *testing.T) *gcRegistry {
	t.Helper()
	opts := reclaimOptions(t, e2eWindow, "")
	opts["retention"] = map[string]any{"pulledwithin": "720h",
		"ignorepullsfrom": map[string]any{"useragents": []any{"Trivy/"}, "accounts": []any{"scanner"}}}
	g := completeGC(t, registrytest.Start(t, registrytest.WithHtpasswd("admin", "pw"), registrytest.WithHtpasswd("scanner", "pw2"),
		registrytest.WithStorageMiddleware("reclaim", opts)))
	dropKeysAtEnd(t, g, opts)
	return g
}

// pullAs GETs the manifest of repo:tag as a client would: go-containerregistry
// with user agent ua, as user.
func pullAs(t *testing.T, g *gcRegistry, ref, ua, user, pass string) {
	t.Helper()
	if _, err := remote.Get(g.Ref(t, ref), remote.WithContext(t.Context()), remote.WithUserAgent(ua),
		remote.WithAuth(&authn.Basic{Username: user, Password: pass})); err != nil {
		t.Fatalf("pull %s as %s (%s): %v", ref, user, ua, err)
	}
}

// A pull by a normal client keeps its version (pulled_within); a pull by
// an ignored scanner (user agent or account) does not. Both still record
// access for GC. A pull after the plan keeps the version at apply.
func TestE2ERetentionPulledWithin(t *testing.T) {
	g := startPulls(t)
	vs := history(t, g, "pulls/app", 7, time.Now().Add(-400*day), day)
	declare(t, g, "prod", img("pulls/app", vs[6]))
	counter := &storagetest.RedisCounter{}
	g.Server.Env().Tracker.Client().AddHook(counter)

	pullAs(t, g, "pulls/app:v006", "containerd/2.0", "admin", "pw") // loads the pull script
	counter.Reset()
	pullAs(t, g, "pulls/app:v001", "Trivy/0.50.1", "admin", "pw")
	ignored := counter.Count()
	counter.Reset()
	pullAs(t, g, "pulls/app:v003", "containerd/2.0", "admin", "pw")
	counted := counter.Count()
	t.Logf("Redis round trips of a manifest GET: %d ignored, %d counted (%v)", ignored, counted, counter.Commands())
	if counted != ignored+1 {
		t.Errorf("a counted pull costs %d round trips, an ignored one %d: want exactly one more", counted, ignored)
	}
	pullAs(t, g, "pulls/app:v002", "docker/27.0", "scanner", "pw2")

	p := g.preview(t, "pulls/app", `{"rollback_slack":0,"min_age":"720h"}`)
	wantCandidates(t, p, []digest.Digest{vs[0], vs[1], vs[2], vs[4], vs[5]})
	if reasonFor(p, vs[3]) != retention.KeptPulled || p.Policy.PulledWithin != retention.Duration(720*time.Hour) {
		t.Fatalf("v003 (pulled by containerd): %s; plan %+v", reasonFor(p, vs[3]), p)
	}
	if p = g.preview(t, "pulls/app", `{"rollback_slack":0,"min_age":"720h","pulled_within":"1ns"}`); reasonFor(p, vs[3]) != retention.Candidate {
		t.Fatalf("pulled_within 1ns keeps v003: %s", reasonFor(p, vs[3]))
	}

	// pulled between plan and apply: the fresh check keeps it
	p = g.preview(t, "pulls/app", `{"rollback_slack":0,"min_age":"720h"}`)
	pullAs(t, g, "pulls/app:v004", "containerd/2.0", "admin", "pw")
	rep := g.apply(t, "pulls/app", p.ID)
	if len(rep.Deleted) != 4 || len(rep.Skipped) != 1 || rep.Skipped[0].Tag != "v004" || rep.Skipped[0].Reason != retention.ChangedPulled {
		t.Fatalf("apply %+v", rep)
	}
	if !tagged(t, g, "pulls/app", "v003") || tagged(t, g, "pulls/app", "v001") || tagged(t, g, "pulls/app", "v002") {
		t.Fatal("wrong tags deleted")
	}
}

// Without retention.pulledwithin nothing records pulls, so a preview that
// asks for pulled_within is refused rather than told "never pulled".
func TestE2ERetentionPulledWithinNeedsRecording(t *testing.T) {
	g := startRetention(t, nil)
	history(t, g, "nopulls/app", 2, time.Now().Add(-400*day), day)
	declare(t, g, "prod", img("nopulls/app", digest.FromString("elsewhere")))
	code, _, out := g.send(t, http.MethodPost, "/gc/v1/repositories/nopulls/app/retention/preview", `{"pulled_within":"720h"}`)
	if code != http.StatusBadRequest || !strings.Contains(string(out), "retention.pulledwithin") {
		t.Fatalf("preview with pulled_within, pulls not recorded: %d %s", code, out)
	}
	if g.Server.Env().Pulls != nil {
		t.Fatal("pulls are recorded without retention.pulledwithin")
	}
}
