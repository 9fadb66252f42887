package middleware

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distribution/distribution/v3/registry/api/errcode"
	v2 "github.com/distribution/distribution/v3/registry/api/v2"
	"github.com/gorilla/mux"
	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/budget"
)

type ctxKey int

const (
	keyNoAccess ctxKey = iota
	keyScope
	keyCacheOnly
)

// WithoutAccessRecords marks ctx so that driver calls made with it record no
// access and check no fence: GC, rebuild and verify read through the
// middleware without keeping everything they look at alive.
func WithoutAccessRecords(ctx context.Context) context.Context {
	return context.WithValue(ctx, keyNoAccess, true)
}

// ForGC is the context of GC's work (the collector, the reclaimer,
// retention apply, the sweep): WithoutAccessRecords, and within GC's
// storage budget (budget.Mark), so it slows itself, never a client.
func ForGC(ctx context.Context) context.Context {
	return budget.Mark(WithoutAccessRecords(ctx))
}

func accessRecordsOff(ctx context.Context) bool {
	v, _ := ctx.Value(keyNoAccess).(bool)
	return v
}

// withCacheOnly marks ctx for a call of Distribution's statter Clear that
// must drop the blob descriptor cache entry and nothing else: Clear also
// deletes the repository's link, which a concurrent push may have just
// written (driver.Delete skips link deletes under this mark).
func withCacheOnly(ctx context.Context) context.Context {
	return context.WithValue(ctx, keyCacheOnly, true)
}

func cacheOnly(ctx context.Context) bool {
	v, _ := ctx.Value(keyCacheOnly).(bool)
	return v
}

// intent is what the request that makes a driver call is about to do with
// the blobs it touches.
type intent int

const (
	// intentRead: a pull, or anything outside a request. Access is best
	// effort and deduplicated; a fence makes the blob unknown.
	intentRead intent = iota
	// intentReference: manifest PUT verification. The request will make the
	// blobs it checks referenced, so every check is fence-checked.
	intentReference
	// intentMount: cross-repository mount. Fence-checked; a fence makes the
	// source unknown so the client falls back to a normal upload.
	intentMount
	// intentCommit: upload commit. Fence-checked, waits for a fence to clear.
	intentCommit
)

// requestInfo is what the middleware learns from the HTTP request that a
// driver call belongs to. Distribution puts the request ("http.request"),
// the mux vars ("vars.name") and gorilla's current route into the context
// it passes down to the driver.
type requestInfo struct {
	intent intent
	pull   bool          // a manifest GET
	route  string        // Distribution's route name (v2.RouteName*)
	repo   string        // vars.name: the repository of the request
	from   string        // mount: the source repository
	mount  digest.Digest // mount: the blob
}

func requestOf(ctx context.Context) requestInfo {
	r, _ := ctx.Value("http.request").(*http.Request)
	if r == nil {
		return requestInfo{}
	}
	info := requestInfo{}
	info.repo, _ = ctx.Value("vars.name").(string)
	route := ""
	if rt := mux.CurrentRoute((&http.Request{}).WithContext(ctx)); rt != nil {
		route = rt.GetName()
	}
	info.route = route
	switch route {
	case v2.RouteNameManifest:
		if r.Method == http.MethodPut {
			info.intent = intentReference
		}
		info.pull = r.Method == http.MethodGet
	case v2.RouteNameBlobUpload, v2.RouteNameBlobUploadChunk:
		q := r.URL.Query()
		switch {
		case r.Method == http.MethodPost && q.Get("mount") != "" && q.Get("from") != "":
			info.intent = intentMount
			info.from = q.Get("from")
			info.mount = digest.Digest(q.Get("mount"))
		case r.Method == http.MethodPut, r.Method == http.MethodPost && q.Get("digest") != "":
			info.intent = intentCommit
		}
	}
	return info
}

// scope is per HTTP request (installed by Env.Handler): the Env serving
// it, what this request has already fence-checked, and whether the
// middleware refused it.
type scope struct {
	env     *Env
	mu      sync.Mutex
	guarded accessTimes
	// linked: blobs this request reached through a repository link (the
	// references a manifest PUT verifies, as opposed to the manifest itself)
	linked  map[digest.Digest]bool
	refused atomic.Pointer[refusal] // nil: not refused
	// unlinked: blobs this request wrote into the blob store and has not
	// linked (yet); queued for review when the request ends.
	unlinked map[digest.Digest]*Env
	// early: reverse links this request writes ahead of their forward
	// link (early.go)
	early map[earlyKey]*earlyLink
	// looks: the looks after this request's forward link writes, running
	// until joined; tagCheck: the early Stat of the revision link a tag
	// is about to name (deferred.go)
	looks    []*look
	tagCheck *tagCheck
}

func (s *scope) commit(e *Env, blob digest.Digest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unlinked == nil {
		s.unlinked = map[digest.Digest]*Env{}
	}
	s.unlinked[blob] = e
}

// settle ends the wait for a link to a blob this request committed: the
// link write succeeded (nothing to review) or failed. It reports whether
// the blob was waiting and its link failed: the caller queues it.
func (s *scope) settle(blob digest.Digest, linked bool) (queue bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, waiting := s.unlinked[blob]
	delete(s.unlinked, blob)
	return waiting && !linked
}

// done takes back the early reverse links the request did not use and
// queues what it committed and never linked (a failed link write, a
// manifest PUT that failed after storing its payload).
func (s *scope) done(ctx context.Context) {
	s.takeBackEarly(ctx)
	s.mu.Lock()
	left := s.unlinked
	s.unlinked = nil
	s.mu.Unlock()
	for blob, e := range left {
		e.enqueue(ctx, "commit", blob)
	}
}

func scopeOf(ctx context.Context) *scope {
	s, _ := ctx.Value(keyScope).(*scope)
	return s
}

// covered reports whether every object was fence-checked by this request
// within maxAge. A successful check at t records an access at t, and GC
// refuses to fence an object accessed within its window, so no fence can
// appear on those objects for a window after t.
func (s *scope) covered(objs []reclaim.Object, maxAge time.Duration) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	age, ok := s.guarded.oldest(objs, s.env.now())
	return ok && age <= maxAge
}

func (s *scope) record(objs []reclaim.Object, at time.Time) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.guarded == nil {
		s.guarded = accessTimes{}
	}
	s.guarded.set(objs, at)
}

// noteLinks remembers the blobs of link objects among objs.
func (s *scope) noteLinks(objs []reclaim.Object) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range objs {
		if o.Repo != "" {
			if s.linked == nil {
				s.linked = map[digest.Digest]bool{}
			}
			s.linked[o.Blob] = true
		}
	}
}

// reachedByLink reports whether this request reached blob through a link.
func (s *scope) reachedByLink(blob digest.Digest) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.linked[blob]
}

// refusal is why the middleware refused a request: the detail of the 503
// the client reads. It names the cause in the client's words and never
// carries internals (a Redis address, a storage path).
type refusal string

const (
	refusedFenced    refusal = "an object this request needs is being garbage-collected now; retry"
	refusedRedis     refusal = "the registry cannot record this write now (its Redis does not answer); retry"
	refusedStorage   refusal = "the registry could not check an object in storage; retry"
	refusedCollected refusal = "an object this write depends on was garbage-collected meanwhile; push it again"
	refusedTagDelete refusal = "the tag was deleted by retention while it was written; push it again"
)

// refuse marks the request refused (Handler answers 503), for why.
func (s *scope) refuse(why refusal) {
	if s != nil {
		s.refused.Store(&why)
	}
}

// unrefuse takes a refusal back: the request goes on another way.
func (s *scope) unrefuse() {
	if s != nil {
		s.refused.Store(nil)
	}
}

// retryAfter is the Retry-After (seconds) sent with a refused request:
// the one value of every 503 Reclaim answers (reclaim/retry.go).
const retryAfter = reclaim.RetryAfterUnavailable

// Handler installs the per-request scope the middleware uses and turns a
// request the middleware refused (a fence, or Redis down on a write) into
// "503 Service Unavailable" with Retry-After and Distribution's
// UNAVAILABLE error code, whatever error Distribution chose for the
// storage error (500 UNKNOWN with the storage error's text, or 400 for a
// manifest whose references could not be verified). Clients retry 503
// (go-containerregistry, containerd, docker); they would give up on a 400.
func (e *Env) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := &scope{env: e}
		rw := &refusalWriter{ResponseWriter: w, s: s, holdAccepted: r.Method == http.MethodDelete}
		ctx := context.WithValue(r.Context(), keyScope, s)
		defer s.done(ctx)
		next.ServeHTTP(rw, watchManifestPut(r.WithContext(ctx))) // index children: indexguard.go
		rw.sendHeldAccepted()
		_, _ = s.joinLooks() // joined at the status already; none outlives its request
	})
}

type refusalWriter struct {
	http.ResponseWriter
	s           *scope
	wroteHeader bool
	replaced    bool // the body is ours: Distribution's is dropped
	// holdAccepted: a DELETE's 202 is sent only once the handler returned.
	// Distribution's manifest DELETE by digest writes 202 and then, when
	// untagging one of its tags failed (a storage error), serves that error
	// too: the client would read 202 while a tag still names the deleted
	// manifest. Held back, the error wins and the client sees the failure.
	holdAccepted bool
	heldAccepted bool
}

func (w *refusalWriter) WriteHeader(code int) {
	if w.wroteHeader {
		return // a second call would only log "superfluous WriteHeader"
	}
	if w.holdAccepted && code == http.StatusAccepted && !w.heldAccepted {
		w.heldAccepted = true
		return
	}
	w.wroteHeader = true
	// The looks after this request's link writes end before the status
	// is sent; one that failed fails the request, whatever Distribution
	// answers (deferred.go).
	_, lookErr := w.s.joinLooks()
	if lookErr != nil && w.s.refused.Load() == nil {
		w.s.refuse(refusedStorage)
	}
	why := w.s.refused.Load()
	if (code < 400 && lookErr == nil) || why == nil {
		w.ResponseWriter.WriteHeader(code)
		return
	}
	w.replaced = true
	h := w.Header()
	h.Set("Retry-After", retryAfter)
	h.Set("Content-Type", "application/json")
	h.Del("Content-Length")
	w.ResponseWriter.WriteHeader(http.StatusServiceUnavailable)
	_ = json.NewEncoder(w.ResponseWriter).Encode(errcode.Errors{errcode.ErrorCodeUnavailable.WithDetail(string(*why))})
}

// sendHeldAccepted sends a held 202 nothing replaced.
func (w *refusalWriter) sendHeldAccepted() {
	if w.heldAccepted && !w.wroteHeader {
		w.wroteHeader = true
		w.ResponseWriter.WriteHeader(http.StatusAccepted)
	}
}

func (w *refusalWriter) Write(b []byte) (int, error) {
	if w.heldAccepted {
		w.sendHeldAccepted() // a 202 with a body: nothing came to replace it
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.replaced {
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer (Flush,
// deadlines).
func (w *refusalWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *refusalWriter) Flush() {
	w.sendHeldAccepted()
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
