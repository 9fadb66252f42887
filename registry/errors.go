package registry

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/distribution/distribution/v3/registry/auth"
	"github.com/sirupsen/logrus"

	"github.com/reclaim-registry/reclaim/gc/collector"
	"github.com/reclaim-registry/reclaim/internal/crosssite"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/retention"
)

// apiError is one entry of an error body, shaped like Distribution's:
//
//	{"errors":[{"code":"NAME_INVALID","message":"...","detail":...}]}
type apiError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Detail  any    `json:"detail,omitempty"`
}

// Request errors the HTTP layer itself raises.
var (
	errBadRequest      = errors.New("bad request")
	errTooLarge        = errors.New("request body too large")
	errMethod          = errors.New("method not allowed")
	errNotFound        = errors.New("no such endpoint")
	errRunNotFound     = errors.New("run not found or expired")
	errUsageUnknown    = errors.New("no usage estimate yet: ask with ?refresh=true, or wait for the reclaimer's refresh")
	errUnauthenticated = errors.New("authentication required")
	errPolicyOverride  = errors.New("the request would loosen the registry's configured policy")
)

// statusOf is the one place errors become HTTP statuses and codes.
func statusOf(err error) (int, apiError) {
	var ae *collector.AbortError
	var re *retention.AbortError
	switch {
	case errors.As(err, &ae):
		// 503: the registry cannot vouch for its access records (or read the
		// repository) right now; retrying later can succeed.
		return http.StatusServiceUnavailable, apiError{"GC_ABORTED", err.Error(), map[string]string{"reason": string(ae.Reason)}}
	case errors.As(err, &re):
		return http.StatusServiceUnavailable, apiError{"RETENTION_ABORTED", err.Error(), map[string]string{"reason": string(re.Reason)}}
	case errors.Is(err, retention.ErrPlanNotFound):
		return http.StatusNotFound, apiError{"PLAN_UNKNOWN", err.Error(), nil}
	case errors.Is(err, retention.ErrPlanExpired):
		return http.StatusConflict, apiError{"PLAN_EXPIRED", err.Error(), nil}
	case errors.Is(err, retention.ErrPolicyChanged):
		return http.StatusConflict, apiError{"POLICY_CHANGED", err.Error(), nil}
	case errors.Is(err, retention.ErrPlanSkipped):
		return http.StatusConflict, apiError{"PLAN_SKIPPED", err.Error(), nil}
	case errors.Is(err, collector.ErrInvalidName):
		return http.StatusBadRequest, apiError{"NAME_INVALID", err.Error(), nil}
	case errors.Is(err, errBadRequest):
		return http.StatusBadRequest, apiError{"PARAM_INVALID", err.Error(), nil}
	case errors.Is(err, errPolicyOverride):
		return http.StatusBadRequest, apiError{"POLICY_OVERRIDE_DENIED", err.Error(), nil}
	case errors.Is(err, errDigestAlgorithm):
		return http.StatusBadRequest, apiError{"DIGEST_INVALID", err.Error(), nil}
	case errors.Is(err, collector.ErrRepositoryNotFound):
		return http.StatusNotFound, apiError{"NAME_UNKNOWN", err.Error(), nil}
	case errors.Is(err, collector.ErrPlanRepository):
		// Never say whose plan it is: the handlers answer as for an unknown
		// id (planUnknown); this is the fallback, without the message.
		return http.StatusNotFound, apiError{"PLAN_UNKNOWN", collector.ErrPlanNotInMemory.Error(), nil}
	case errors.Is(err, collector.ErrPlanNotInMemory):
		return http.StatusNotFound, apiError{"PLAN_UNKNOWN", err.Error(), nil}
	case errors.Is(err, retention.ErrPinExpired):
		return http.StatusBadRequest, apiError{"PIN_EXPIRED", err.Error(), nil}
	case errors.Is(err, retention.ErrInvalidDigest):
		return http.StatusBadRequest, apiError{"DIGEST_INVALID", err.Error(), nil}
	case errors.Is(err, retention.ErrInvalid):
		return http.StatusBadRequest, apiError{"PARAM_INVALID", err.Error(), nil}
	case errors.Is(err, retention.ErrPinNotFound):
		return http.StatusNotFound, apiError{"PIN_UNKNOWN", err.Error(), nil}
	case errors.Is(err, retention.ErrSourceNotFound):
		return http.StatusNotFound, apiError{"SOURCE_UNKNOWN", err.Error(), nil}
	case errors.Is(err, errManifestUnknown):
		return http.StatusNotFound, apiError{"MANIFEST_UNKNOWN", err.Error(), nil}
	case errors.Is(err, errPinRace):
		return http.StatusConflict, apiError{"GC_DELETING", err.Error(), nil}
	case errors.Is(err, retention.ErrUnavailable), errors.Is(err, reclaim.ErrTrackerUnavailable):
		return http.StatusServiceUnavailable, apiError{"UNAVAILABLE", err.Error(), nil}
	case errors.Is(err, errUsageUnknown):
		return http.StatusNotFound, apiError{"USAGE_UNKNOWN", err.Error(), nil}
	case errors.Is(err, collector.ErrNoUsageStore):
		return http.StatusMethodNotAllowed, apiError{"UNSUPPORTED", err.Error(), nil}
	case errors.Is(err, errRunNotFound):
		return http.StatusNotFound, apiError{"RUN_UNKNOWN", err.Error(), nil}
	case errors.Is(err, errNotFound):
		return http.StatusNotFound, apiError{"NOT_FOUND", err.Error(), nil}
	case errors.Is(err, reclaim.ErrRepositoryBusy):
		return http.StatusConflict, apiError{"GC_BUSY", err.Error(), nil}
	case errors.Is(err, errTooMany), errors.Is(err, collector.ErrTooManyDryRuns):
		return http.StatusTooManyRequests, apiError{"TOO_MANY_REQUESTS", err.Error(), nil}
	case errors.Is(err, errTooLarge):
		return http.StatusRequestEntityTooLarge, apiError{"SIZE_INVALID", err.Error(), nil}
	case errors.Is(err, errMethod), errors.Is(err, collector.ErrDisabled):
		return http.StatusMethodNotAllowed, apiError{"UNSUPPORTED", err.Error(), nil}
	case errors.Is(err, crosssite.ErrRefused):
		// 403, not 401: the credentials may be fine; the page that sent
		// them is not the registry's (gcapi_crosssite.go).
		return http.StatusForbidden, apiError{"CROSS_SITE_REQUEST", err.Error(), nil}
	case errors.Is(err, errUnauthenticated), errors.Is(err, auth.ErrInvalidCredential), errors.Is(err, auth.ErrAuthenticationFailure):
		return http.StatusUnauthorized, apiError{"UNAUTHORIZED", "authentication required", nil}
	}
	return http.StatusInternalServerError, apiError{"UNKNOWN", "internal error", nil}
}

// writeError writes err as a Distribution-style JSON error body. An auth
// challenge sets its own headers (WWW-Authenticate) first.
func writeError(w http.ResponseWriter, r *http.Request, err error) {
	var ch auth.Challenge
	if errors.As(err, &ch) {
		ch.SetHeaders(r, w)
		err = fmt.Errorf("%w: %v", errUnauthenticated, err)
	}
	status, body := statusOf(err)
	if status == http.StatusInternalServerError {
		logrus.WithError(err).WithField("path", r.URL.Path).Error("reclaim: gc api")
	}
	switch status {
	case http.StatusServiceUnavailable, http.StatusConflict:
		w.Header().Set("Retry-After", "30")
	case http.StatusTooManyRequests:
		w.Header().Set("Retry-After", retryAfterBusy)
	}
	writeJSON(w, status, map[string][]apiError{"errors": {body}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
