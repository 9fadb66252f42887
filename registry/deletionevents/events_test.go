package deletionevents

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/distribution/distribution/v3/notifications"
	events "github.com/docker/go-events"
	"github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/reclaim-registry/reclaim/reclaim"
)

// receiver is a notifications endpoint: it keeps every event it was sent,
// decoded as a consumer using Distribution's types decodes it, and the
// "reclaim" extension beside it.
type receiver struct {
	*httptest.Server
	mu     sync.Mutex
	got    []notifications.Event
	ext    []Extension
	posts  int
	signal chan struct{}
	// fail answers the n-th post (from 1) with a failure, when it returns true
	fail func(n int, w http.ResponseWriter) bool
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{signal: make(chan struct{}, 1000)}
	r.Server = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.posts++
	n := r.posts
	r.mu.Unlock()
	if r.fail != nil && r.fail(n, w) {
		return
	}
	body, _ := io.ReadAll(req.Body)
	if ct := req.Header.Get("Content-Type"); ct != notifications.EventsMediaType {
		http.Error(w, "content type "+ct, http.StatusBadRequest)
		return
	}
	// Distribution's own envelope, then its Event type: a consumer that
	// knows nothing of Reclaim.
	var env notifications.Envelope
	var typed struct{ Events []notifications.Event }
	var ours struct{ Events []Event }
	if json.Unmarshal(body, &env) != nil || json.Unmarshal(body, &typed) != nil || json.Unmarshal(body, &ours) != nil || len(env.Events) != len(typed.Events) {
		http.Error(w, "bad envelope: "+string(body), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.got = append(r.got, typed.Events...)
	for _, e := range ours.Events {
		r.ext = append(r.ext, e.Reclaim)
	}
	r.mu.Unlock()
	for range typed.Events {
		r.signal <- struct{}{}
	}
}

// wait returns once n events arrived (or fails the test after a minute).
func (r *receiver) wait(t *testing.T, n int) ([]notifications.Event, []Extension) {
	t.Helper()
	for i := 0; i < n; i++ {
		select {
		case <-r.signal:
		case <-time.After(time.Minute):
			t.Fatalf("%d of %d events arrived", i, n)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]notifications.Event{}, r.got...), append([]Extension{}, r.ext...)
}

// parse builds a configuration from a notifications block, through
// Distribution's own parser.
func parse(t testing.TB, endpoints string) *configuration.Configuration {
	t.Helper()
	y := "version: 0.1\nstorage:\n  inmemory: {}\nhttp:\n  addr: :5000\nnotifications:\n  endpoints:\n" + endpoints
	conf, err := configuration.Parse(strings.NewReader(y))
	if err != nil {
		t.Fatal(err)
	}
	return conf
}

func endpointYAML(name, url, extra string) string {
	return fmt.Sprintf("    - name: %s\n      url: %s\n      timeout: 2s\n      threshold: 1\n      backoff: 10ms\n%s", name, url, extra)
}

var run = reclaim.Deletions{Source: "gc", RunID: "run-1", PlanID: "plan-1", Instance: "inst-1", Objects: []reclaim.Deletion{
	{Kind: reclaim.KindManifest, Repository: "team/app", Digest: digest.FromString("m"), MediaType: v1.MediaTypeImageManifest, Size: 500, Reason: "unreferenced"},
	{Kind: reclaim.KindLayerLink, Repository: "team/app", Digest: digest.FromString("l"), Reason: "unreferenced"},
	{Kind: reclaim.KindBlob, Repository: "team/app", Digest: digest.FromString("b"), Size: 1024, Reason: "unreferenced"},
}}

// Every deletion arrives, in order, as a delete event a consumer of
// Distribution's events reads as it reads the registry's own; Reclaim's
// fields are in the extension.
func TestDeletedReachesEndpointInOrder(t *testing.T) {
	rc := newReceiver(t)
	s := New(parse(t, endpointYAML("audit", rc.URL, "")+endpointYAML("off", rc.URL, "      disabled: true\n")))
	s.Deleted(t.Context(), run)
	got, ext := rc.wait(t, len(run.Objects))
	if len(got) != len(run.Objects) {
		t.Fatalf("%d events, want %d (the disabled endpoint must get none)", len(got), len(run.Objects))
	}
	for i, o := range run.Objects {
		e, x := got[i], ext[i]
		if e.Action != notifications.EventActionDelete || e.Target.Repository != o.Repository || e.Target.Digest != o.Digest ||
			e.Target.MediaType != o.MediaType || e.Target.Length != o.Size || e.ID == "" || e.Timestamp.IsZero() || e.Source.Addr == "" {
			t.Errorf("event %d: %+v, want %+v", i, e, o)
		}
		want := Extension{Source: "gc", Kind: o.Kind, Reason: o.Reason, RunID: "run-1", PlanID: "plan-1", Instance: "inst-1"}
		if x != want {
			t.Errorf("extension %d: %+v, want %+v", i, x, want)
		}
	}
}

// An endpoint that answers 500, then drops the connection, then comes back
// gets every event, in order: Distribution's retrying sink holds them.
func TestEndpointDownThenBack(t *testing.T) {
	rc := newReceiver(t)
	rc.fail = func(n int, w http.ResponseWriter) bool {
		switch n {
		case 1, 2:
			http.Error(w, "down", http.StatusInternalServerError)
			return true
		case 3:
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return true
		}
		return false
	}
	s := New(parse(t, endpointYAML("flaky", rc.URL, "")))
	s.Deleted(t.Context(), run)
	got, _ := rc.wait(t, len(run.Objects))
	for i, o := range run.Objects {
		if got[i].Target.Digest != o.Digest {
			t.Fatalf("event %d is %s, want %s", i, got[i].Target.Digest, o.Digest)
		}
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.posts != len(run.Objects)+3 {
		t.Fatalf("%d posts, want %d (3 failed, then one per event)", rc.posts, len(run.Objects)+3)
	}
}

// An endpoint whose ignore rules name the manifest media type (both the
// old ignoredmediatypes and ignore.mediatypes) gets every other event; the
// last event arriving after the manifest's would have proves it was
// dropped, not late.
func TestIgnoredMediaTypes(t *testing.T) {
	for _, rule := range []string{
		"      ignoredmediatypes:\n        - " + v1.MediaTypeImageManifest + "\n",
		"      ignore:\n        mediatypes:\n          - " + v1.MediaTypeImageManifest + "\n",
	} {
		rc := newReceiver(t)
		s := New(parse(t, endpointYAML("nomanifests", rc.URL, rule)))
		s.Deleted(t.Context(), run)
		got, _ := rc.wait(t, 2)
		if len(got) != 2 || got[0].Target.Digest != run.Objects[1].Digest || got[1].Target.Digest != run.Objects[2].Digest {
			t.Fatalf("rule %q: got %+v", rule, got)
		}
	}
}

// recorder is a sink that keeps what it is written.
type recorder struct{ got []events.Event }

func (r *recorder) Write(e events.Event) error { r.got = append(r.got, e); return nil }
func (r *recorder) Close() error               { return nil }

// An endpoint that ignores the delete action is written nothing; one that
// ignores pushes everything.
func TestIgnoredActions(t *testing.T) {
	for action, want := range map[string]int{"delete": 0, "push": len(run.Objects)} {
		conf := parse(t, endpointYAML("x", "http://127.0.0.1:1", "      ignore:\n        actions:\n          - "+action+"\n"))
		ig := endpoint(conf.Notifications.Endpoints[0]).(*ignoring)
		rec := &recorder{}
		ig.Sink = rec
		s := &Sink{sink: ig, now: time.Now}
		s.Deleted(t.Context(), run)
		if len(rec.got) != want {
			t.Errorf("ignore %s: %d events written, want %d", action, len(rec.got), want)
		}
	}
}

// No enabled endpoint: no sink, and the callers' field stays nil.
func TestNoEndpoints(t *testing.T) {
	if s := New(parse(t, endpointYAML("off", "http://127.0.0.1:1", "      disabled: true\n"))); s != nil {
		t.Fatal("a sink without an enabled endpoint")
	}
}

var _ reclaim.DeletionSink = (*Sink)(nil)
