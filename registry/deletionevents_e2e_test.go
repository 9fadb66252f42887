package registry_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/distribution/distribution/v3/notifications"
	v1types "github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/opencontainers/go-digest"
	"github.com/redis/go-redis/v9"

	"github.com/reclaim-registry/reclaim/gc/collector"
	"github.com/reclaim-registry/reclaim/internal/config"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/registry/deletionevents"
	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/retention"
)

// endpoint is a notifications endpoint under test: it keeps the deletion
// events it receives (those with Reclaim's extension; the registry's own
// push and pull events go to it too) and, while down, answers 500.
type endpoint struct {
	*httptest.Server
	down     atomic.Bool
	refused  chan struct{} // a post with a deletion event was refused
	arrived  chan struct{} // one per deletion event received
	mu       sync.Mutex
	received []deletionevents.Event
	// seen: event ids received. Delivery is at least once (a POST whose
	// answer the sink did not get in time is sent again), so a consumer
	// keeps one event per id, as this one does.
	seen map[string]bool
}

func newEndpoint(t *testing.T) *endpoint {
	e := &endpoint{refused: make(chan struct{}, 1), arrived: make(chan struct{}, 10000), seen: map[string]bool{}}
	e.Server = httptest.NewServer(http.HandlerFunc(e.serve))
	t.Cleanup(e.Close)
	return e
}

func (e *endpoint) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var env struct{ Events []deletionevents.Event }
	if r.Header.Get("Content-Type") != notifications.EventsMediaType || json.Unmarshal(body, &env) != nil {
		http.Error(w, "not an envelope", http.StatusBadRequest)
		return
	}
	var ours []deletionevents.Event
	for _, ev := range env.Events {
		if ev.Reclaim.Source != "" {
			ours = append(ours, ev)
		}
	}
	if e.down.Load() {
		if len(ours) > 0 {
			select {
			case e.refused <- struct{}{}:
			default:
			}
		}
		http.Error(w, "down", http.StatusInternalServerError)
		return
	}
	e.mu.Lock()
	var fresh int
	for _, ev := range ours {
		if !e.seen[ev.ID] {
			e.seen[ev.ID] = true
			e.received = append(e.received, ev)
			fresh++
		}
	}
	e.mu.Unlock()
	for range fresh {
		e.arrived <- struct{}{}
	}
}

// wait returns the deletion events received once there are n in all.
func (e *endpoint) wait(t *testing.T, n int) []deletionevents.Event {
	t.Helper()
	for {
		e.mu.Lock()
		got := append([]deletionevents.Event{}, e.received...)
		e.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-e.arrived:
		case <-time.After(time.Minute):
			t.Fatalf("%d of %d deletion events arrived", len(got), n)
		}
	}
}

// deletion is what a test expects an event to name.
type deletion struct {
	kind   reclaim.ObjectKind
	digest digest.Digest
	tag    string
}

func withEndpoint(name, url string, ignoredMediaTypes ...string) registrytest.Option {
	return registrytest.WithConfig(func(c *configuration.Configuration) {
		c.Notifications.Endpoints = append(c.Notifications.Endpoints, configuration.Endpoint{Name: name, URL: url,
			Timeout: 5 * time.Second, Threshold: 1, Backoff: 20 * time.Millisecond, IgnoredMediaTypes: ignoredMediaTypes})
	})
}

// checkEvents compares the events of source to want, in order.
func checkEvents(t *testing.T, name string, got []deletionevents.Event, source string, want []deletion) {
	t.Helper()
	var mine []deletionevents.Event
	for _, e := range got {
		if e.Reclaim.Source == source {
			mine = append(mine, e)
		}
	}
	if len(mine) != len(want) {
		t.Fatalf("%s: %d %s events, want %d: %+v", name, len(mine), source, len(want), mine)
	}
	for i, w := range want {
		e := mine[i]
		if e.Action != notifications.EventActionDelete || e.Reclaim.Kind != w.kind || e.Target.Digest != w.digest || e.Target.Tag != w.tag {
			t.Errorf("%s: %s event %d: %s %s %s %q, want %s %s %q", name, source, i, e.Action, e.Reclaim.Kind, e.Target.Digest, e.Target.Tag, w.kind, w.digest, w.tag)
		}
	}
}

// collectDeletions lists a real run's deletions in the order its delete
// phase made them: manifests, then layer links, then blobs.
func collectDeletions(rep *collector.Report) []deletion {
	var out []deletion
	for _, l := range []struct {
		kind reclaim.ObjectKind
		ds   []digest.Digest
	}{{reclaim.KindManifest, rep.ManifestsDeleted}, {reclaim.KindLayerLink, rep.LayersUnlinked}, {reclaim.KindBlob, rep.BlobsDeleted}} {
		for _, d := range l.ds {
			out = append(out, deletion{kind: l.kind, digest: d})
		}
	}
	return out
}

func without(ds []deletion, kind reclaim.ObjectKind) []deletion {
	var out []deletion
	for _, d := range ds {
		if d.kind != kind {
			out = append(out, d)
		}
	}
	return out
}

// TestE2EDeletionEvents: every deletion of a real collect, a reclaimer tick
// and a retention apply reaches the notifications endpoints, in order, as
// Distribution delete events (issue 28): "audit" gets them all; "flaky" is
// down (500) during the collect and back before the tick, and gets them all
// too (Distribution's retrying sink); "nomanifests" ignores the OCI
// manifest media type and gets all but the manifests' events.
func TestE2EDeletionEvents(t *testing.T) {
	audit, flaky, nomanifests := newEndpoint(t), newEndpoint(t), newEndpoint(t)
	flaky.down.Store(true)
	g := startGC(t, withEndpoint("audit", audit.URL), withEndpoint("flaky", flaky.URL),
		withEndpoint("nomanifests", nomanifests.URL, string(v1types.OCIManifestSchema1)))

	// collect: an image whose tag moved on is deleted whole
	old := push(t, g, "ev/app:latest", registrytest.Image(t, layer(t), layer(t)))
	push(t, g, "ev/app:latest", registrytest.Image(t, layer(t)))
	g.settle(t)
	rep := g.collect(t, "ev/app")
	want := collectDeletions(rep)
	t.Logf("collect: %d manifests, %d layer links, %d blobs deleted: %d events per endpoint",
		len(rep.ManifestsDeleted), len(rep.LayersUnlinked), len(rep.BlobsDeleted), len(want))
	if len(rep.ManifestsDeleted) != 1 || rep.ManifestsDeleted[0].String() != old.String() || len(rep.BlobsDeleted) < 3 {
		t.Fatalf("collect deleted %+v", rep)
	}
	got := audit.wait(t, len(want))
	checkEvents(t, "audit", got, "gc", want)
	for _, e := range got {
		if e.Target.Repository != "ev/app" || e.Reclaim.RunID != rep.RunID || e.Reclaim.Instance == "" {
			t.Errorf("event %+v of run %s", e, rep.RunID)
		}
		if e.Reclaim.Kind == reclaim.KindManifest && e.Target.MediaType != string(v1types.OCIManifestSchema1) {
			t.Errorf("manifest event's media type %q", e.Target.MediaType)
		}
	}
	checkEvents(t, "nomanifests", nomanifests.wait(t, len(want)-1), "gc", without(want, reclaim.KindManifest))
	select {
	case <-flaky.refused:
	case <-time.After(time.Minute):
		t.Fatal("the flaky endpoint was never sent a deletion event")
	}
	flaky.down.Store(false)
	checkEvents(t, "flaky", flaky.wait(t, len(want)), "gc", want)

	// reclaimer tick: a layer whose only link was deleted through the API
	l := layer(t)
	push(t, g, "ev/solo:v1", registrytest.Image(t, l))
	ld, _ := l.Digest()
	if resp := g.Do(t, http.MethodDelete, "/v2/ev/solo/blobs/"+ld.String(), nil); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("delete layer link: %d", resp.StatusCode)
	}
	g.settle(t)
	dueNow(t, g, ld.String())
	rc, err := g.Server.NewReclaimer(true)
	if err != nil {
		t.Fatal(err)
	}
	var ticked []deletion
	for _, d := range rc.Tick(t.Context()).Decisions {
		if d.Reason == reclaim.ReasonUnreferenced {
			ticked = append(ticked, deletion{kind: reclaim.KindBlob, digest: d.Digest})
		}
	}
	if len(ticked) == 0 || ticked[len(ticked)-1].digest.String() != ld.String() && ticked[0].digest.String() != ld.String() {
		t.Fatalf("the tick deleted %v, not the layer %s", ticked, ld)
	}

	// retention apply: the old versions' tags
	history(t, g, "ev/ret", 6, time.Now().Add(-40*day), day)
	declare(t, g, "prod", img("other/app", digest.FromString("x")))
	applied := g.apply(t, "ev/ret", g.preview(t, "ev/ret", `{"keep_newest":2,"min_age":"720h"}`).ID)
	var tags []deletion
	for _, r := range applied.Deleted {
		tags = append(tags, deletion{kind: reclaim.KindTag, digest: r.Digest, tag: r.Tag})
	}
	if len(tags) == 0 {
		t.Fatalf("apply deleted nothing: %+v", applied)
	}

	n := len(want) + len(ticked) + len(tags)
	for name, e := range map[string]*endpoint{"audit": audit, "flaky": flaky} {
		got := e.wait(t, n)
		checkEvents(t, name, got, "gc", want)
		checkEvents(t, name, got, "reclaimer", ticked)
		checkEvents(t, name, got, "retention", tags)
		checkRetentionEvents(t, got, applied)
	}
}

// dueNow makes blob's review due now: Age moves the access records, not
// the review queue's due times, which the window passing would reach.
func dueNow(t *testing.T, g *gcRegistry, blob string) {
	t.Helper()
	opts, _, err := config.Load(g.Config)
	if err != nil {
		t.Fatal(err)
	}
	opts, _ = opts.WithDefaults()
	if err := g.Server.Env().Tracker.Client().ZAdd(t.Context(), opts.Prefix+"review", redis.Z{Score: 0, Member: blob}).Err(); err != nil {
		t.Fatal(err)
	}
}

// checkRetentionEvents: a retention event names the plan and the tag's
// repository.
func checkRetentionEvents(t *testing.T, got []deletionevents.Event, applied *retention.ApplyReport) {
	t.Helper()
	for _, e := range got {
		if e.Reclaim.Source == "retention" && (e.Reclaim.PlanID != applied.PlanID || e.Target.Repository != "ev/ret" || e.Reclaim.Reason != "retention") {
			t.Errorf("retention event %+v", e)
		}
	}
}

// With the trash on, a collect's events name the trash entry that holds
// each removed object (restorable by it), and no blob event is sent: the
// blobs' data stays in the trash.
func TestE2EDeletionEventsNameTheTrashEntry(t *testing.T) {
	audit := newEndpoint(t)
	g := startTrash(t, withEndpoint("audit", audit.URL), "1h", nil)
	push(t, g, "evtrash/app:latest", registrytest.Image(t, layer(t), layer(t)))
	push(t, g, "evtrash/app:latest", registrytest.Image(t, layer(t)))
	g.settle(t)
	rep := g.collect(t, "evtrash/app")
	if len(rep.BlobsDeleted) != 0 || len(rep.ManifestsDeleted) != 1 {
		t.Fatalf("collect with the trash on: %+v", rep)
	}
	want := collectDeletions(rep)
	got := audit.wait(t, len(want))
	checkEvents(t, "audit", got, "gc", want)
	entries := map[string]bool{}
	for _, e := range g.trashList(t, "run="+rep.RunID).Entries {
		entries[e.ID] = true
	}
	for _, e := range got {
		if !entries[e.Reclaim.TrashEntry] {
			t.Errorf("event %s %s names trash entry %q, not one of the run's %v", e.Reclaim.Kind, e.Target.Digest, e.Reclaim.TrashEntry, entries)
		}
	}
}

// A purge through the API deletes data for good: each blob it freed is
// told once, source "trash", without a trash entry, after the collect's
// own events (which named their entries); a blob the purge kept (a layer
// another manifest links) is not told.
func TestE2EDeletionEventsForAPurge(t *testing.T) {
	audit := newEndpoint(t)
	g := startTrash(t, withEndpoint("audit", audit.URL), "1h", nil)
	shared := layer(t)
	push(t, g, "evpurge/app:latest", registrytest.Image(t, shared, layer(t)))
	push(t, g, "evpurge/app:latest", registrytest.Image(t, shared))
	g.settle(t)
	rep := g.collect(t, "evpurge/app")
	collected := collectDeletions(rep)
	audit.wait(t, len(collected))
	g.settle(t)
	pr := g.purge(t)
	var want []deletion
	for _, p := range pr.Entries {
		if p.Blob != nil && p.Blob.Deleted() {
			want = append(want, deletion{kind: reclaim.KindBlob, digest: p.Blob.Digest})
		}
	}
	if len(want) != pr.BlobsFreed || len(want) == 0 {
		t.Fatalf("purge freed %d blobs, %d decisions say deleted: %+v", pr.BlobsFreed, len(want), pr)
	}
	got := audit.wait(t, len(collected)+len(want))
	checkEvents(t, "audit", got, "trash", want)
	for _, e := range got {
		if e.Reclaim.Source != "trash" {
			continue
		}
		if e.Reclaim.TrashEntry != "" || !strings.HasPrefix(e.Reclaim.RunID, "purge-") || e.Reclaim.Instance == "" {
			t.Errorf("purge event %s: trash entry %q, run %q, instance %q; want no entry, a purge- id and the instance",
				e.Target.Digest, e.Reclaim.TrashEntry, e.Reclaim.RunID, e.Reclaim.Instance)
		}
		if e.Target.Digest.String() == digestOf(t, shared).String() {
			t.Errorf("the shared layer %s, still linked, was told deleted", e.Target.Digest)
		}
	}
}
