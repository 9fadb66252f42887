package registry_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/retention"
	"github.com/reclaim-registry/reclaim/retention/inuse"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

// Deploy-aware retention end to end (issue 12, parts 2 to 4): tag
// histories are pushed as tiny images, then their tags' link times are set
// on the filesystem storage, so a year of nightly builds takes a second.

const day = 24 * time.Hour

// startRetention starts a registry with GC (and so retention) on, without
// waiting out the window: retention does not need it.
func startRetention(t *testing.T, retentionOpts map[string]any) *gcRegistry {
	t.Helper()
	opts := reclaimOptions(t, e2eWindow, "")
	if retentionOpts != nil {
		opts["retention"] = retentionOpts
	}
	g := completeGC(t, registrytest.Start(t,
		registrytest.WithStorageMiddleware("gchook", nil),
		registrytest.WithStorageMiddleware("reclaim", opts)))
	dropKeysAtEnd(t, g, opts)
	return g
}

// dropKeysAtEnd deletes the test's keys (opts' prefix) when it ends: on a
// shared Redis, leave none of them behind.
func dropKeysAtEnd(t testing.TB, g *gcRegistry, opts map[string]any) {
	prefix, ok := opts["prefix"].(string)
	if !ok {
		return
	}
	c := g.Server.Env().Tracker.Client()
	t.Cleanup(func() {
		_ = storagetest.ScanKeys(context.Background(), c, prefix+"*", func(k string) error { return c.Del(context.Background(), k).Err() })
	})
}

// history pushes n versions of repo, tagged v000, v001, ... and dated
// oldest, oldest+step, ...: v000 is the oldest.
func history(t *testing.T, g *gcRegistry, repo string, n int, oldest time.Time, step time.Duration) []digest.Digest {
	t.Helper()
	out := make([]digest.Digest, n)
	for i := range n {
		tag := fmt.Sprintf("v%03d", i)
		out[i] = digest.Digest(push(t, g, repo+":"+tag, registrytest.Image(t, layer(t))).String())
		setTagTime(t, g, repo, tag, oldest.Add(time.Duration(i)*step))
	}
	return out
}

func setTagTime(t *testing.T, g *gcRegistry, repo, tag string, at time.Time) {
	t.Helper()
	p := filepath.Join(g.Root, filepath.FromSlash(layout.TagCurrentPath(repo, tag)))
	if err := os.Chtimes(p, at, at); err != nil {
		t.Fatal(err)
	}
}

// declare PUTs source's in-use images.
func declare(t *testing.T, g *gcRegistry, source string, images ...inuse.Image) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"images": append([]inuse.Image{}, images...)})
	if code, _, out := g.send(t, http.MethodPut, "/gc/v1/inuse/sources/"+source, string(b)); code != http.StatusOK {
		t.Fatalf("declare %s: %d %s", source, code, out)
	}
}

func img(repo string, d digest.Digest) inuse.Image {
	return inuse.Image{Repository: repo, Digest: d}
}

// preview asks for a plan of repo with the policy override body.
func (g *gcRegistry) preview(t *testing.T, repo, override string) *retention.Plan {
	t.Helper()
	code, _, out := g.send(t, http.MethodPost, "/gc/v1/repositories/"+repo+"/retention/preview", override)
	var p retention.Plan
	if code != http.StatusOK || json.Unmarshal(out, &p) != nil {
		t.Fatalf("preview %s: %d %s", repo, code, out)
	}
	return &p
}

func (g *gcRegistry) apply(t *testing.T, repo, id string) *retention.ApplyReport {
	t.Helper()
	code, _, out := g.send(t, http.MethodPost, "/gc/v1/repositories/"+repo+"/retention/plans/"+id+"/apply", "")
	var rep retention.ApplyReport
	if code != http.StatusOK || json.Unmarshal(out, &rep) != nil {
		t.Fatalf("apply %s: %d %s", id, code, out)
	}
	return &rep
}

// digestsOf returns the digests of entries, in order.
func digestsOf(es []retention.Entry) []digest.Digest {
	out := make([]digest.Digest, len(es))
	for i, e := range es {
		out[i] = e.Digest
	}
	return out
}

// reasonFor returns the reason the plan gives d ("" when d is in no list).
func reasonFor(p *retention.Plan, d digest.Digest) retention.Verdict {
	for _, e := range append(append([]retention.Entry{}, p.Candidates...), p.Kept...) {
		if e.Digest == d {
			return e.Reason
		}
	}
	return ""
}

// wantCandidates checks the plan's candidates are exactly want (any order).
func wantCandidates(t *testing.T, p *retention.Plan, want []digest.Digest) {
	t.Helper()
	got := map[digest.Digest]bool{}
	for _, d := range digestsOf(p.Candidates) {
		got[d] = true
	}
	if len(got) != len(want) {
		t.Fatalf("candidates %d, want %d: %+v", len(got), len(want), p.Candidates)
	}
	for _, d := range want {
		if !got[d] {
			t.Fatalf("%s is no candidate (%s)", d, reasonFor(p, d))
		}
	}
}

// tagged reports whether repo:tag exists in storage (read raw).
func tagged(t *testing.T, g *gcRegistry, repo, tag string) bool {
	t.Helper()
	_, err := g.raw.Stat(context.Background(), layout.TagCurrentPath(repo, tag))
	return err == nil
}

func tagName(i int) string { return fmt.Sprintf("v%03d", i) }

// A service deployed once, a year ago, while nightly builds pushed 50
// newer versions: it keeps its running version (and everything newer);
// only the builds older than it and than the retention age go.
func TestE2ERetentionDeployedOnceKeepsItsVersion(t *testing.T) {
	g := startRetention(t, nil)
	now := time.Now()
	vs := history(t, g, "svc/app", 56, now.Add(-420*day), day) // v000..v004 older than the deployed v005
	declare(t, g, "prod", img("svc/app", vs[5]))
	p := g.preview(t, "svc/app", `{"keep_newest":10,"rollback_slack":0,"min_age":"2160h"}`)
	if p.Status != retention.PlanReady || reasonFor(p, vs[5]) != retention.KeptInUse || reasonFor(p, vs[55]) != retention.KeptNewerThanUsed {
		t.Fatalf("plan %+v", p)
	}
	wantCandidates(t, p, vs[:5])
	rep := g.apply(t, "svc/app", p.ID)
	if len(rep.Deleted) != 5 || len(rep.Skipped) != 0 {
		t.Fatalf("apply %+v", rep)
	}
	for i := range vs {
		if tagged(t, g, "svc/app", tagName(i)) != (i >= 5) {
			t.Fatalf("after apply %s tagged: %v", tagName(i), !(i >= 5))
		}
	}
	registrytest.AssertPullable(t, g.Registry, "svc/app:v005")
}

// Three environments at three versions keep all three and every newer one.
func TestE2ERetentionThreeEnvironments(t *testing.T) {
	g := startRetention(t, nil)
	vs := history(t, g, "env/app", 30, time.Now().Add(-400*day), day)
	declare(t, g, "prod", img("env/app", vs[10]))
	declare(t, g, "staging", img("env/app", vs[20]))
	declare(t, g, "dev", img("env/app", vs[25]))
	p := g.preview(t, "env/app", `{"rollback_slack":0,"min_age":"720h"}`)
	wantCandidates(t, p, vs[:10])
	for _, i := range []int{10, 20, 25} {
		if r := reasonFor(p, vs[i]); r != retention.KeptInUse {
			t.Fatalf("v%d: %s", i, r)
		}
	}
}

// Rollback slack: the K versions below the oldest in use are kept.
func TestE2ERetentionRollbackSlack(t *testing.T) {
	g := startRetention(t, nil)
	vs := history(t, g, "slack/app", 20, time.Now().Add(-400*day), day)
	declare(t, g, "prod", img("slack/app", vs[10]))
	p := g.preview(t, "slack/app", `{"rollback_slack":3,"min_age":"720h"}`)
	wantCandidates(t, p, vs[:7])
	for _, i := range []int{7, 8, 9} {
		if r := reasonFor(p, vs[i]); r != retention.KeptRollbackSlack {
			t.Fatalf("v%d: %s", i, r)
		}
	}
}

// A shared image that three other teams run is in use for all of them: it
// stays while any one of them declares it.
func TestE2ERetentionSharedImage(t *testing.T) {
	g := startRetention(t, nil)
	vs := history(t, g, "shared/base", 12, time.Now().Add(-400*day), day)
	for _, team := range []string{"team-a", "team-b", "team-c"} {
		declare(t, g, team, img("shared/base", vs[6]), img(team+"/svc", digest.FromString(team)))
	}
	p := g.preview(t, "shared/base", `{"rollback_slack":0,"min_age":"720h"}`)
	wantCandidates(t, p, vs[:6])
	if code, _, out := g.send(t, http.MethodDelete, "/gc/v1/inuse/sources/team-a", ""); code != http.StatusNoContent {
		t.Fatalf("%d %s", code, out)
	}
	declare(t, g, "team-b", img("team-b/svc", digest.FromString("b")))
	p = g.preview(t, "shared/base", `{"rollback_slack":0,"min_age":"720h"}`)
	if reasonFor(p, vs[6]) != retention.KeptInUse {
		t.Fatalf("team-c still runs it: %+v", p)
	}
	wantCandidates(t, p, vs[:6])
}

// The newest N are kept in a repository nothing runs, and creation time
// only permits: a version younger than the retention age stays.
func TestE2ERetentionNothingInUseKeepsNewest(t *testing.T) {
	g := startRetention(t, nil)
	vs := history(t, g, "idle/app", 15, time.Now().Add(-40*day), 2*day) // v000 40 days old, v014 12 days
	declare(t, g, "prod", img("other/app", digest.FromString("x")))
	p := g.preview(t, "idle/app", `{"keep_newest":5,"min_age":"720h"}`)
	// v000..v009 are below the newest 5; only those older than 30 days go.
	wantCandidates(t, p, vs[:6])
	if reasonFor(p, vs[14]) != retention.KeptNewest || reasonFor(p, vs[6]) != retention.KeptTooYoung {
		t.Fatalf("plan %+v", p)
	}
	if !strings.HasPrefix(p.Candidates[0].Tags[0], "v") {
		t.Fatal(p.Candidates)
	}
}

// tagMoveApply is a registry with a retention plan that deletes
// svc/app's v000, v001 and v002, and a gate that holds the apply right
// after its check of v000's manifest (the read of its revision link),
// under v000's fence.
func tagMoveApply(t *testing.T) (*gcRegistry, *retention.Plan, *storagetest.Gate) {
	t.Helper()
	g := startRetention(t, nil)
	vs := history(t, g, "svc/app", 4, time.Now().Add(-400*day), day)
	declare(t, g, "prod", img("svc/app", vs[3]))
	p := g.preview(t, "svc/app", `{"keep_newest":1,"rollback_slack":0,"min_age":"1h"}`)
	wantCandidates(t, p, vs[:3])
	return g, p, storagetest.NewGate("Stat", layout.RevisionLinkPath("svc/app", vs[0]))
}

// applyThenPush starts the apply of p, waits until checking holds it, then
// starts a push that moves tagName(0) to moved (one try, no retries).
func applyThenPush(t *testing.T, g *gcRegistry, p *retention.Plan, checking *storagetest.Gate, moved v1.Image) (<-chan *retention.ApplyReport, <-chan error) {
	applied := make(chan *retention.ApplyReport, 1)
	go func() { applied <- g.apply(t, "svc/app", p.ID) }()
	<-checking.Reached
	pushed := make(chan error, 1)
	go func() {
		pushed <- remote.Write(g.Ref(t, "svc/app:"+tagName(0)), moved,
			append(g.Remote(t), remote.WithRetryBackoff(remote.Backoff{Duration: time.Millisecond, Steps: 1}))...)
	}()
	return applied, pushed
}

// A push moves a planned tag while retention's apply is between its
// fresh-state checks and its delete (issue 24, race 2). The apply is held
// right after a storage call of its checks returned (the read of the
// planned manifest's revision link); the push moves the tag to another
// image meanwhile. The push must not be told 201 for a tag the apply then
// deletes: either the apply sees the move and keeps the tag, or the push
// fails with a retryable 503 and its retry puts the tag back. Before the
// compare-and-delete (tag fences) the push got 201 and the tag was gone.
func TestE2ERetentionApplyVsTagMove(t *testing.T) {
	g, p, checking := tagMoveApply(t)
	moved := registrytest.Image(t, layer(t))
	tagWritten := make(chan struct{})
	var once sync.Once
	gcHook.SetAfter(t, func(ctx context.Context, method, path string, err error) {
		if method == "PutContent" && path == layout.TagCurrentPath("svc/app", tagName(0)) {
			once.Do(func() { close(tagWritten) })
		}
		checking.WaitAfter(ctx, method, path, err)
	})
	applied, pushed := applyThenPush(t, g, p, checking, moved)
	var pushErr error
	pushDone := false
	select {
	case <-tagWritten: // the push wrote the tag and is checking the tag's fence
	case pushErr = <-pushed:
		pushDone = true
	}
	checking.Release()
	rep := <-applied
	if !pushDone {
		pushErr = <-pushed
	}
	if pushErr == nil {
		if !tagged(t, g, "svc/app", tagName(0)) {
			t.Fatalf("the push moving %s was acknowledged, and the apply then deleted the tag: %+v", tagName(0), rep)
		}
		registrytest.AssertPullable(t, g.Registry, "svc/app:"+tagName(0))
		return
	}
	var te *transport.Error
	if !errors.As(pushErr, &te) || te.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("push during the apply: %v, want 201 or 503", pushErr)
	}
	if err := remote.Write(g.Ref(t, "svc/app:"+tagName(0)), moved, g.Remote(t)...); err != nil {
		t.Fatalf("retry of the push: %v", err)
	}
	registrytest.AssertPullable(t, g.Registry, "svc/app:"+tagName(0))
}

// The same race with the push asking late: the apply fences the tag, reads
// it, and is held right after a check; the push writes the tag and is held
// right after its write, until the apply has deleted the tag and released
// the fence. Its question then finds no fence; before the tag fence's mark
// it answered 201 for a tag that was gone (seen in CI in
// TestE2ERetentionApplyVsTagMove, when the apply won that race). The mark
// makes it look at the tag again: 503, and its retry tags. Also when the
// push stalled for longer than the mark lasts (the mark deleted and the
// clocks moved two minutes on): it then looks at the tag whatever its
// question found.
func TestE2ERetentionApplyReleasedBeforeThePushAsks(t *testing.T) {
	for _, stalled := range []bool{false, true} {
		t.Run(fmt.Sprintf("stalled=%v", stalled), func(t *testing.T) {
			g, p, checking := tagMoveApply(t)
			moved := registrytest.Image(t, layer(t))
			tagWritten, goOn := make(chan struct{}), make(chan struct{})
			var once sync.Once
			gcHook.SetAfter(t, func(ctx context.Context, method, path string, err error) {
				if method == "PutContent" && path == layout.TagCurrentPath("svc/app", tagName(0)) && err == nil {
					once.Do(func() {
						close(tagWritten)
						<-goOn // the push is held until the apply is done
					})
				}
				checking.WaitAfter(ctx, method, path, err)
			})
			applied, pushed := applyThenPush(t, g, p, checking, moved)
			<-tagWritten
			checking.Release()
			rep := <-applied
			if stalled {
				forgetTagMark(t, g, "svc/app", tagName(0))
				g.Age(t, 2*time.Minute)
			}
			close(goOn)
			pushErr := <-pushed
			if len(rep.Deleted) == 0 || rep.Deleted[0].Tag != tagName(0) {
				t.Fatalf("the apply did not delete %s: the interleaving was not forced: %+v", tagName(0), rep)
			}
			var te *transport.Error
			if !errors.As(pushErr, &te) || te.StatusCode != http.StatusServiceUnavailable {
				t.Fatalf("push whose tag the apply deleted after it was written: %v (tagged now: %v), want 503", pushErr, tagged(t, g, "svc/app", tagName(0)))
			}
			if err := remote.Write(g.Ref(t, "svc/app:"+tagName(0)), moved, g.Remote(t)...); err != nil {
				t.Fatalf("retry of the push: %v", err)
			}
			registrytest.AssertPullable(t, g.Registry, "svc/app:"+tagName(0))
		})
	}
}
