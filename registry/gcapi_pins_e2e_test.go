package registry_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/gc"
	"github.com/reclaim-registry/reclaim/gc/collector"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/retention/pin"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

func pinPath(repo string, ref fmt.Stringer) string {
	return "/gc/v1/repositories/" + repo + "/pins/" + ref.String()
}

// pin PUTs a pin and returns the status and the body.
func (g *gcRegistry) pin(t *testing.T, repo string, ref fmt.Stringer, body string) (int, []byte) {
	t.Helper()
	code, _, b := g.send(t, http.MethodPut, pinPath(repo, ref), body)
	return code, b
}

// keptAs returns the decision the report kept d with; it fails the test
// when d was deleted.
func keptAs(t *testing.T, rep *collector.Report, d digest.Digest) gc.Decision {
	t.Helper()
	for _, k := range rep.Kept {
		if k.Kind == reclaim.KindManifest && k.Digest == d {
			return k
		}
	}
	t.Fatalf("%s not kept: deleted %v", d, rep.ManifestsDeleted)
	return gc.Decision{}
}

// Pin an untagged manifest: a collection keeps it as "pinned"; unpin it,
// and the next collection deletes it.
func TestE2EPinKeepsUntaggedManifest(t *testing.T) {
	g := startGC(t)
	d := deletable(t, g, "pin/app")
	code, body := g.pin(t, "pin/app", d, `{"note":"legal hold #42"}`)
	var got pin.Pin
	if code != http.StatusCreated || json.Unmarshal(body, &got) != nil || got.Note != "legal hold #42" || got.Ref != d.String() || got.ExpiresAt != nil {
		t.Fatalf("PUT pin: %d %s", code, body)
	}
	if code, body := g.pin(t, "pin/app", d, `{"note":"legal hold #43"}`); code != http.StatusOK {
		t.Fatalf("PUT again: %d %s, want 200 (replaced)", code, body)
	}
	code, _, body = g.send(t, http.MethodGet, "/gc/v1/repositories/pin/app/pins", "")
	var list struct {
		Pins []pin.Pin `json:"pins"`
	}
	if code != http.StatusOK || json.Unmarshal(body, &list) != nil || len(list.Pins) != 1 || list.Pins[0].Note != "legal hold #43" {
		t.Fatalf("GET pins: %d %s", code, body)
	}
	rep := g.collect(t, "pin/app")
	if k := keptAs(t, rep, d); k.Reason != reclaim.ReasonPinned {
		t.Fatalf("kept as %s, want pinned", k.Reason)
	}
	if !stored(t, g, "pin/app", d) {
		t.Fatal("the pinned manifest is gone")
	}

	if code, _, body := g.send(t, http.MethodDelete, pinPath("pin/app", d), ""); code != http.StatusNoContent {
		t.Fatalf("DELETE pin: %d %s", code, body)
	}
	if code, _, body := g.send(t, http.MethodDelete, pinPath("pin/app", d), ""); code != http.StatusNotFound {
		t.Fatalf("DELETE again: %d %s, want 404", code, body)
	}
	rep = g.collect(t, "pin/app")
	if !containsDigest(rep.ManifestsDeleted, d) || stored(t, g, "pin/app", d) {
		t.Fatalf("after unpinning: deleted %v", rep.ManifestsDeleted)
	}
}

// A pin past its expiry protects nothing.
func TestE2EExpiredPinDoesNotProtect(t *testing.T) {
	g := startGC(t)
	old := push(t, g, "exp/app:old", registrytest.Image(t, layer(t)))
	push(t, g, "exp/app:keep", registrytest.Image(t, layer(t)))
	untag(t, g, "exp/app", "old")
	d := digest.Digest(old.String())
	expires := time.Now().Add(time.Second)
	expiry := expires.UTC().Format(time.RFC3339Nano)
	if code, body := g.pin(t, "exp/app", d, `{"expires_at":"`+expiry+`"}`); code != http.StatusCreated {
		t.Fatalf("PUT pin: %d %s", code, body)
	}
	g.settle(t)
	// A pin expires by the registry's wall clock, which settle does not
	// move: wait out the pin's second.
	time.Sleep(time.Until(expires) + time.Millisecond)
	if code, _, body := g.send(t, http.MethodGet, pinPath("exp/app", d), ""); code != http.StatusNotFound {
		t.Fatalf("GET expired pin: %d %s, want 404", code, body)
	}
	rep := g.collect(t, "exp/app")
	if !containsDigest(rep.ManifestsDeleted, d) {
		t.Fatalf("an expired pin kept %s: %+v", d, rep.Kept)
	}
}

// A pin added after the plan is respected when the plan is applied.
func TestE2EPinAfterPlanIsRespected(t *testing.T) {
	g := startGC(t)
	d := deletable(t, g, "late/app")
	plan := makePlan(t, g, "late/app")
	if code, body := g.pin(t, "late/app", d, ""); code != http.StatusCreated {
		t.Fatalf("PUT pin: %d %s", code, body)
	}
	code, body := g.post(t, "/gc/v1/repositories/late/app/plans/"+plan+"/apply?dry_run=false")
	rep := decodeReport(t, body)
	if code != http.StatusOK || keptAs(t, rep, d).Reason != reclaim.ReasonPinned || !stored(t, g, "late/app", d) {
		t.Fatalf("apply: %d %s", code, body)
	}
	if len(rep.Changed) == 0 || rep.Changed[0].Digest != d || rep.Changed[0].Reason != reclaim.ReasonPinned {
		t.Fatalf("changed %+v, want %s pinned", rep.Changed, d)
	}
}

// A pin that lands while the collection holds the manifest's fence, before
// its last re-check (the tags are re-read under the fence, then the pins):
// the PUT answers 409 GC_DELETING, and the collection keeps the manifest
// as pinned. Asking again then answers 200.
func TestE2EPinUnderTheFenceIsRespected(t *testing.T) {
	g := startGC(t)
	d := deletable(t, g, "race/app")
	var during int
	var body []byte
	fired := false
	setHook(t, func(_ context.Context, method, path string) error {
		if method == "List" && path == layout.TagsDir("race/app") && !fired {
			fired = true // the sweep's re-read of the tags: the fence is held
			during, body = g.pin(t, "race/app", d, `{"note":"deployed"}`)
		}
		return nil
	})
	code, rb := g.collectRaw(t, "race/app", false)
	if !fired || during != http.StatusConflict {
		t.Fatalf("PUT under the fence: fired %v, %d %s; want 409", fired, during, body)
	}
	if c, _ := decodeErr(t, body); c != "GC_DELETING" {
		t.Fatalf("PUT under the fence: %s", body)
	}
	rep := decodeReport(t, rb)
	if k := keptAs(t, rep, d); code != http.StatusOK || k.Reason != reclaim.ReasonPinned || k.Detail != "pinned since the plan" || !stored(t, g, "race/app", d) {
		t.Fatalf("collect: %d %+v", code, k)
	}
	if code, body := g.pin(t, "race/app", d, `{"note":"deployed"}`); code != http.StatusOK {
		t.Fatalf("PUT after the run: %d %s", code, body)
	}
}

// A pin that lands after the collection's last re-check, while it deletes:
// the PUT is never answered with a protection that came too late. It says
// 409; asked again once the delete is done, 404.
func TestE2EPinTooLateIsNotPromised(t *testing.T) {
	g := startGC(t)
	d := deletable(t, g, "gone/app")
	var during int
	setHook(t, func(_ context.Context, method, path string) error {
		if method == "Delete" && path == layout.RevisionDir("gone/app", d) && during == 0 {
			during, _ = g.pin(t, "gone/app", d, "")
		}
		return nil
	})
	code, rb := g.collectRaw(t, "gone/app", false)
	if rep := decodeReport(t, rb); code != http.StatusOK || !containsDigest(rep.ManifestsDeleted, d) {
		t.Fatalf("collect: %d %s", code, rb)
	}
	if during != http.StatusConflict {
		t.Fatalf("PUT during the delete: %d, want 409", during)
	}
	if code, body := g.pin(t, "gone/app", d, ""); code != http.StatusNotFound {
		t.Fatalf("PUT after the delete: %d %s, want 404", code, body)
	}
}

// Bad requests are 400 and unknown things 404, before anything is stored.
func TestE2EPinRequests(t *testing.T) {
	g := startGC(t)
	d := deletable(t, g, "req/app")
	for _, tc := range []struct {
		method, path, body string
		status             int
		code               string
	}{
		{http.MethodPut, "/gc/v1/repositories/req/app/pins/-bad", "", 400, "PARAM_INVALID"},
		{http.MethodPut, "/gc/v1/repositories/Req/pins/v1", "", 400, "NAME_INVALID"},
		{http.MethodPut, "/gc/v1/repositories/req/app/pins/sha256:../../x", "", 400, "DIGEST_INVALID"},
		{http.MethodDelete, "/gc/v1/repositories/req/app/pins/sha256:a/b", "", 400, "DIGEST_INVALID"},
		{http.MethodPut, "/gc/v1/repositories/req/app/pins/sha256:abc", "", 400, "DIGEST_INVALID"},
		{http.MethodPut, pinPath("req/app", d), `{"expires_in":"-1h"}`, 400, "PIN_EXPIRED"},
		// valid on arrival, expired before the answer: no 201 that protects nothing
		{http.MethodPut, pinPath("req/app", d), `{"expires_in":"1ns"}`, 400, "PIN_EXPIRED"},
		{http.MethodPut, pinPath("req/app", d), `{"ttl":"1h"}`, 400, "PARAM_INVALID"},
		{http.MethodPut, pinPath("req/app", d), `{"note":"a"} {}`, 400, "PARAM_INVALID"},
		{http.MethodPut, pinPath("no/such", d), "", 404, "NAME_UNKNOWN"},
		{http.MethodPut, pinPath("req/app", digest.FromString("nope")), "", 404, "MANIFEST_UNKNOWN"},
		{http.MethodPut, "/gc/v1/repositories/req/app/pins/nosuchtag", "", 404, "MANIFEST_UNKNOWN"},
		{http.MethodGet, "/gc/v1/repositories/req/app/pins/v1", "", 404, "PIN_UNKNOWN"},
		{http.MethodPut, "/gc/v1/repositories/req/app/pins", "", 405, "UNSUPPORTED"},
	} {
		code, _, body := g.send(t, tc.method, tc.path, tc.body)
		if c, _ := decodeErr(t, body); code != tc.status || c != tc.code {
			t.Errorf("%s %s %s: %d %s, want %d %s", tc.method, tc.path, tc.body, code, body, tc.status, tc.code)
		}
	}
	// A tag pin: stored and listed; it keeps the tag from retention, and
	// the collector keeps a tagged manifest anyway.
	if code, body := g.pin(t, "req/app", stringer("keep"), `{"expires_in":"720h"}`); code != http.StatusCreated {
		t.Fatalf("tag pin: %d %s", code, body)
	}
	code, _, body := g.send(t, http.MethodGet, "/gc/v1/repositories/req/app/pins/", "")
	if code != http.StatusOK || !json.Valid(body) || !strings.Contains(string(body), `"ref": "keep"`) {
		t.Fatalf("list: %d %s", code, body)
	}
	// The unpinned manifest goes as before.
	if rep := g.collect(t, "req/app"); !containsDigest(rep.ManifestsDeleted, d) {
		t.Fatalf("deleted %v", rep.ManifestsDeleted)
	}
}

type stringer string

func (s stringer) String() string { return string(s) }

// A pin of a tag that a retention apply deletes while the pin is written:
// the PUT found the tag, then the apply fenced it, read the pins (none
// yet), deleted it and released its fence, all before the pin was stored
// and the PUT asked whether the tag is fenced. It is not fenced any more,
// and the tag is gone: the PUT must not answer 201, a protection of a tag
// that no longer exists (its image is untagged, GC's to collect). It
// answers 409; asked again, 404. Also when the PUT stalled so long that
// the fence's mark (kept a minute after the release) is gone too.
func TestE2EPinOfATagRetentionDeleted(t *testing.T) {
	for _, markGone := range []bool{false, true} {
		t.Run(fmt.Sprintf("mark gone=%v", markGone), func(t *testing.T) {
			g, p, _ := tagMoveApply(t)
			tag := stringer(tagName(0))
			found := storagetest.NewGate("Stat", layout.TagCurrentPath("svc/app", tagName(0)))
			gcHook.SetAfter(t, found.WaitAfter)
			type answer struct {
				code int
				body []byte
			}
			pinned := make(chan answer, 1)
			go func() {
				code, body := g.pin(t, "svc/app", tag, `{"note":"deployed"}`)
				pinned <- answer{code, body}
			}()
			select {
			case <-found.Reached: // the PUT found the tag
			case a := <-pinned:
				t.Fatalf("the PUT did not look for the tag through the storage: %d %s", a.code, a.body)
			}
			rep := g.apply(t, "svc/app", p.ID)
			if tagged(t, g, "svc/app", tagName(0)) {
				t.Fatalf("the apply kept %s: %+v", tagName(0), rep)
			}
			if markGone {
				forgetTagMark(t, g, "svc/app", tagName(0))
			}
			found.Release()
			a := <-pinned
			if a.code != http.StatusConflict {
				t.Fatalf("pin PUT of a tag the apply deleted meanwhile: %d %s, want 409", a.code, a.body)
			}
			if c, _ := decodeErr(t, a.body); c != "GC_DELETING" {
				t.Fatalf("pin PUT: %s", a.body)
			}
			if code, body := g.pin(t, "svc/app", tag, `{"note":"deployed"}`); code != http.StatusNotFound {
				t.Fatalf("pin PUT again: %d %s, want 404", code, body)
			}
		})
	}
}

// forgetTagMark deletes the mark a tag fence left (as a minute passing
// would), and fails the test when there was none.
func forgetTagMark(t *testing.T, g *gcRegistry, repo, tag string) {
	t.Helper()
	ctx, c := context.Background(), g.Server.Env().Tracker.Client()
	n := 0
	err := storagetest.ScanKeys(ctx, c, "*{tag:"+repo+"}:d:"+tag, func(k string) error {
		n++
		return c.Del(ctx, k).Err()
	})
	if err != nil || n == 0 {
		t.Fatalf("forget the mark of %s:%s: %d keys, %v", repo, tag, n, err)
	}
}
