package registry

import (
	"context"
	"net/http"
	"time"

	"github.com/reclaim-registry/reclaim/storage/middleware"
)

// ReadyPath is the readiness probe: 200 "ok" while this instance can take
// pushes, 503 "not ready" while it cannot. Unauthenticated, on the registry
// listener, and it says nothing more: the why is in GET /gc/v1/status and
// the log.
const ReadyPath = "/readyz"

// readyTimeout bounds the probe's one Redis round trip, under the 1 s a
// Kubernetes probe waits by default.
const readyTimeout = 800 * time.Millisecond

// readiness answers ReadyPath and passes everything else to next. Without
// the reclaim middleware there is nothing of Reclaim's to be ready for.
func readiness(env *middleware.Env, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != ReadyPath {
			next.ServeHTTP(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		if env != nil && !redisReady(r.Context(), env) {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
}

// redisReady: Redis answers and is trusted. RecordingSince is the read a
// push's fence check depends on; it fails when Redis cannot be reached and
// when its eviction policy may drop records (redisstate: ErrRedisEvicts).
// A Redis that has recorded for less than a window is ready: pushes work,
// only GC waits.
func redisReady(ctx context.Context, env *middleware.Env) bool {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	_, err := env.Tracker.RecordingSince(ctx)
	return err == nil
}
