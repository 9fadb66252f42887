package registry

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/distribution/distribution/v3/configuration"

	"github.com/reclaim-registry/reclaim/storage"
)

// GET /gc/v1/status reports the GC API (gcapi.go) and the background
// reclaimer together:
//
//	{ "enabled": true, "window_seconds": ..., "redis": "ok", ...   <- the GC API's fields
//	  "reclaimer": { "enabled": true, "last_tick": ..., "queue_length": 3, "due": 1,
//	                 "deleted": 10, "deleted_by_reason": {...}, "kept_by_reason": {...},
//	                 "last_error": "...", ... },
//	  "redis_health": { "maxmemory_policy": "noeviction", "evicts": false,
//	                    "persistence": "aof", "epoch": ..., "nodes": [{"addr", "run_id", ...}],
//	                    "last_loss": {"reason": "restart", "at": ..., "epoch": ...} } }
//
// It is authenticated exactly like the GC API: the same access controller
// code path (gcAPI.authorize), any authenticated caller. When the GC API is
// disabled the reclaimer's part is still served, so an operator can watch a
// reclaimer on instances that do not take collect requests.

func init() { register(newStatusHandler) }

type statusHandler struct {
	next   http.Handler // the GC API and everything below it
	config *configuration.Configuration
	auth   *gcAPI // only for its authorize, configured like the real one
}

func newStatusHandler(config *configuration.Configuration, next http.Handler) http.Handler {
	a, _ := newGCAPI(config, nil).(*gcAPI)
	return &statusHandler{next: next, config: config, auth: a}
}

func (h *statusHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != gcPrefix+"status" {
		h.next.ServeHTTP(w, r)
		return
	}
	if r.Method != http.MethodGet {
		writeError(w, r, fmt.Errorf("%w: %s; use GET", errMethod, r.Method))
		return
	}
	if err := h.auth.authorize(r, "", ""); err != nil {
		writeError(w, r, err)
		return
	}
	// The GC API's own status, when it serves one.
	rec := httptest.NewRecorder()
	h.next.ServeHTTP(rec, r)
	out := map[string]any{}
	status := http.StatusOK
	switch rec.Code {
	case http.StatusOK, http.StatusServiceUnavailable:
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			out = map[string]any{"gc_api": fmt.Sprintf("unreadable status: %v", err)}
		}
		status = rec.Code
	default:
		// GC API disabled or misconfigured: say so, serve the rest.
		out["enabled"] = false
		out["gc_api"] = errorMessage(rec.Body.Bytes())
	}
	out["reclaimer"] = h.reclaimerStatus(r)
	out["redis_health"] = h.redisHealth(r)
	writeJSON(w, status, out)
}

// redisHealth is what the tracker's last recording tick read from Redis
// INFO (storage/redishealth.go): the eviction policy (GC refuses while it
// evicts), persistence, each master's run_id, the epoch, and the last time
// the epoch was moved forward and why.
func (h *statusHandler) redisHealth(r *http.Request) any {
	env, err := storage.Open(r.Context(), h.config)
	if err != nil {
		return map[string]any{"error": err.Error()}
	}
	return env.Tracker.RedisHealth()
}

func (h *statusHandler) reclaimerStatus(r *http.Request) any {
	rh := reclaimerFor(h.config)
	switch {
	case rh == nil:
		return map[string]any{"enabled": false, "state": "not started"}
	case rh.err != nil:
		return map[string]any{"enabled": rh.cfg.Enabled, "state": "not started", "last_error": rh.err.Error()}
	case rh.r == nil:
		return map[string]any{"enabled": false, "state": "disabled (reclaimer.enabled is false: no deletions)"}
	}
	return rh.r.Status(r.Context())
}

// errorMessage extracts the first message of a Distribution-style error body.
func errorMessage(body []byte) string {
	var e struct {
		Errors []apiError `json:"errors"`
	}
	if json.Unmarshal(body, &e) == nil && len(e.Errors) > 0 {
		return e.Errors[0].Message
	}
	return string(bytes.TrimSpace(body))
}
