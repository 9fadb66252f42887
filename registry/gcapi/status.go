package gcapi

import (
	"context"
	"fmt"
	"net/http"

	"github.com/reclaim-registry/reclaim/internal/config"
	"github.com/reclaim-registry/reclaim/registry/accesscontrol"
)

// GET /gc/v1/status reports the GC API (api.go) and the background
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
// It is authenticated like the GC API, by the same access controller: any
// authenticated caller. When the GC API is disabled ("enabled": false,
// "gc_api": why) the reclaimer's part is still served, so an operator can
// watch a reclaimer on instances that do not take collect requests.
type statusHandler struct {
	access *accesscontrol.Control
	api    *API
	// health (Config.RedisHealth) and reclaimer are Config's (nil: without the
	// middleware; the reclaimer disabled).
	health    func() any
	reclaimer func(ctx context.Context) any
}

// serve answers GET /gc/v1/status, a route of the GC API
// (routes.go) served while the API is disabled too.
func (h *statusHandler) serve(w http.ResponseWriter, r *http.Request) error {
	if err := h.access.Authorize(r, "", ""); err != nil {
		return err
	}
	out := h.api.status(r.Context())
	out["reclaimer"] = h.reclaimerStatus(r)
	out["redis_health"] = h.redisHealth()
	writeJSON(w, http.StatusOK, out)
	return nil
}

// redisHealth is what the tracker's last recording tick read from Redis
// INFO (redisstate/redishealth.go): the eviction policy (GC refuses
// while it evicts), persistence, each master's run_id, the epoch, and the
// last time the epoch was moved forward and why.
func (h *statusHandler) redisHealth() any {
	if h.health == nil {
		return map[string]any{"error": fmt.Sprintf("the %q storage middleware is not configured", config.MiddlewareName)}
	}
	return h.health()
}

func (h *statusHandler) reclaimerStatus(r *http.Request) any {
	if h.reclaimer == nil {
		return map[string]any{"enabled": false, "state": "disabled (reclaimer.enabled is false: no deletions)"}
	}
	return h.reclaimer(r.Context())
}
