package gcapi

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"

	"github.com/distribution/distribution/v3/registry/auth"

	"github.com/reclaim-registry/reclaim/gc/collector"
	"github.com/reclaim-registry/reclaim/internal/crosssite"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/retention"
	"github.com/reclaim-registry/reclaim/retention/inuse"
	"github.com/reclaim-registry/reclaim/retention/pin"
)

func TestStatusOfMapsEveryError(t *testing.T) {
	for err, want := range map[error]int{
		collector.ErrInvalidName:        400,
		errBadRequest:                   400,
		ErrDigestAlgorithm:              400,
		collector.ErrRepositoryNotFound: 404,
		collector.ErrPlanNotInMemory:    404,
		reclaim.ErrRepositoryBusy:       409,
		collector.ErrPlanRepository:     404, // never says whose plan it is
		errTooLarge:                     413,
		collector.ErrDisabled:           405,
		&collector.AbortError{Reason: reclaim.AbortRedisUntrusted}: 503,
		errUnauthenticated: 401,
	} {
		if got, _ := statusOf(err); got != want {
			t.Errorf("%v: %d, want %d", err, got, want)
		}
	}
}

// Every error the API answers with, wrapped as the handlers wrap it: its
// status, code, message, detail and Retry-After (the bodies and statuses
// the ordered switch this table replaced gave; docs/api.md, "Errors").
func TestErrorBodies(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("%w: more", err) }
	gcAbort := &collector.AbortError{Reason: reclaim.AbortRedisUnavailable, Err: reclaim.ErrTrackerUnavailable}
	retAbort := &retention.AbortError{Reason: "inuse_empty"}
	for _, tc := range []struct {
		err     error
		status  int
		code    string
		message string // "" = the error's text
		detail  any
		retry   string
	}{
		{err: gcAbort, status: 503, code: "GC_ABORTED", detail: map[string]string{"reason": "redis_unavailable"}, retry: "1"},
		{err: wrap(gcAbort), status: 503, code: "GC_ABORTED", detail: map[string]string{"reason": "redis_unavailable"}, retry: "1"},
		{err: wrap(retAbort), status: 503, code: "RETENTION_ABORTED", detail: map[string]string{"reason": "inuse_empty"}, retry: "1"},
		{err: wrap(retention.ErrPlanNotFound), status: 404, code: "PLAN_UNKNOWN"},
		{err: wrap(retention.ErrPlanExpired), status: 409, code: "PLAN_EXPIRED", retry: "30"},
		{err: wrap(retention.ErrPolicyChanged), status: 409, code: "POLICY_CHANGED", retry: "30"},
		{err: wrap(retention.ErrPlanSkipped), status: 409, code: "PLAN_SKIPPED", retry: "30"},
		{err: wrap(collector.ErrInvalidName), status: 400, code: "NAME_INVALID"},
		{err: wrap(errBadRequest), status: 400, code: "PARAM_INVALID"},
		{err: wrap(errPolicyOverride), status: 400, code: "POLICY_OVERRIDE_DENIED"},
		{err: wrap(ErrDigestAlgorithm), status: 400, code: "DIGEST_INVALID"},
		{err: wrap(collector.ErrRepositoryNotFound), status: 404, code: "NAME_UNKNOWN"},
		{err: wrap(collector.ErrPlanRepository), status: 404, code: "PLAN_UNKNOWN", message: collector.ErrPlanNotInMemory.Error()},
		{err: wrap(collector.ErrPlanNotInMemory), status: 404, code: "PLAN_UNKNOWN"},
		{err: wrap(pin.ErrExpired), status: 400, code: "PIN_EXPIRED"},
		{err: wrap(pin.ErrInvalidDigest), status: 400, code: "DIGEST_INVALID"},
		{err: wrap(pin.ErrInvalid), status: 400, code: "PARAM_INVALID"},
		{err: wrap(retention.ErrInvalid), status: 400, code: "PARAM_INVALID"},
		{err: wrap(inuse.ErrTooLarge), status: 400, code: "PARAM_INVALID"},
		{err: wrap(pin.ErrNotFound), status: 404, code: "PIN_UNKNOWN"},
		{err: wrap(retention.ErrSourceNotFound), status: 404, code: "SOURCE_UNKNOWN"},
		{err: wrap(errManifestUnknown), status: 404, code: "MANIFEST_UNKNOWN"},
		{err: wrap(errPinRace), status: 409, code: "GC_DELETING", retry: "30"},
		{err: wrap(retention.ErrUnavailable), status: 503, code: "UNAVAILABLE", retry: "1"},
		{err: wrap(reclaim.ErrTrackerUnavailable), status: 503, code: "UNAVAILABLE", retry: "1"},
		{err: wrap(errUsageUnknown), status: 404, code: "USAGE_UNKNOWN"},
		{err: wrap(collector.ErrNoUsageStore), status: 405, code: "UNSUPPORTED"},
		{err: wrap(errRunNotFound), status: 404, code: "RUN_UNKNOWN"},
		{err: wrap(errNotFound), status: 404, code: "NOT_FOUND"},
		{err: wrap(reclaim.ErrRepositoryBusy), status: 409, code: "GC_BUSY", retry: "30"},
		{err: wrap(errTooMany), status: 429, code: "TOO_MANY_REQUESTS", retry: retryAfterBusy},
		{err: wrap(collector.ErrTooManyDryRuns), status: 429, code: "TOO_MANY_REQUESTS", retry: retryAfterBusy},
		{err: wrap(errTooLarge), status: 413, code: "SIZE_INVALID"},
		{err: wrap(errMethod), status: 405, code: "UNSUPPORTED"},
		{err: ErrDisabled, status: 405, code: "UNSUPPORTED"},
		{err: wrap(crosssite.ErrRefused), status: 403, code: "CROSS_SITE_REQUEST"},
		{err: wrap(errUnauthenticated), status: 401, code: "UNAUTHORIZED", message: "authentication required"},
		{err: wrap(auth.ErrInvalidCredential), status: 401, code: "UNAUTHORIZED", message: "authentication required"},
		{err: wrap(auth.ErrAuthenticationFailure), status: 401, code: "UNAUTHORIZED", message: "authentication required"},
		{err: errors.New("disk on fire"), status: 500, code: "UNKNOWN", message: "internal error"},
		{err: errors.Join(errors.New("a"), collector.ErrInvalidName), status: 400, code: "NAME_INVALID"},
	} {
		t.Run(tc.code, func(t *testing.T) {
			status, body := statusOf(tc.err)
			want := tc.message
			if want == "" {
				want = tc.err.Error()
			}
			if status != tc.status || body.Code != tc.code || body.Message != want || !reflect.DeepEqual(body.Detail, tc.detail) {
				t.Errorf("%v: %d %+v, want %d %s %q %v", tc.err, status, body, tc.status, tc.code, want, tc.detail)
			}
			rec := httptest.NewRecorder()
			WriteError(rec, httptest.NewRequest(http.MethodGet, "/gc/v1/x", nil), tc.err)
			if rec.Code != tc.status || rec.Header().Get("Retry-After") != tc.retry {
				t.Errorf("%v: written %d Retry-After %q, want %d %q", tc.err, rec.Code, rec.Header().Get("Retry-After"), tc.status, tc.retry)
			}
		})
	}
}

// Every 503 says the one Retry-After the storage middleware's refusals
// say too (reclaim.RetryAfterUnavailable), and every code has one status.
func TestRetryAfterOfUnavailable(t *testing.T) {
	for _, c := range []errorCode{codeAborted, codeRetentionAborted, codeUnavailable} {
		if c.Status != http.StatusServiceUnavailable || c.RetryAfter != reclaim.RetryAfterUnavailable {
			t.Errorf("%s: %d Retry-After %q", c.Value, c.Status, c.RetryAfter)
		}
	}
}
