package gcapi

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
	"github.com/reclaim-registry/reclaim/retention/inuse"
	"github.com/reclaim-registry/reclaim/retention/pin"
)

// apiError is one entry of an error body, shaped like Distribution's:
//
//	{"errors":[{"code":"NAME_INVALID","message":"...","detail":...}]}
type apiError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Detail  any    `json:"detail,omitempty"`
}

// errorCode is one code of the API's error bodies with everything an
// answer of it carries, as each of Distribution's errcode.ErrorCode
// registers its own HTTP status: a code always answers with the same
// status and the same Retry-After.
type errorCode struct {
	Value  string
	Status int
	// RetryAfter is the Retry-After header in seconds ("": none).
	RetryAfter string
	// Message, when set, is sent instead of the error's own text (which
	// may say more than the caller should learn).
	Message string
}

// retryAfterConflict is the Retry-After of a 409: another run or a
// changed plan stands in the way, for longer than a 503's state does.
const retryAfterConflict = "30"

// The codes, in the order of docs/api.md's table ("Errors"); the one place
// a code gets its status.
var (
	codeNameInvalid      = errorCode{Value: "NAME_INVALID", Status: http.StatusBadRequest}
	codeParamInvalid     = errorCode{Value: "PARAM_INVALID", Status: http.StatusBadRequest}
	codeDigestInvalid    = errorCode{Value: "DIGEST_INVALID", Status: http.StatusBadRequest}
	codePinExpired       = errorCode{Value: "PIN_EXPIRED", Status: http.StatusBadRequest}
	codePolicyOverride   = errorCode{Value: "POLICY_OVERRIDE_DENIED", Status: http.StatusBadRequest}
	codeUnauthorized     = errorCode{Value: "UNAUTHORIZED", Status: http.StatusUnauthorized, Message: "authentication required"}
	codeCrossSite        = errorCode{Value: "CROSS_SITE_REQUEST", Status: http.StatusForbidden}
	codeNameUnknown      = errorCode{Value: "NAME_UNKNOWN", Status: http.StatusNotFound}
	codePlanUnknown      = errorCode{Value: "PLAN_UNKNOWN", Status: http.StatusNotFound}
	codeRunUnknown       = errorCode{Value: "RUN_UNKNOWN", Status: http.StatusNotFound}
	codeNotFound         = errorCode{Value: "NOT_FOUND", Status: http.StatusNotFound}
	codeUnsupported      = errorCode{Value: "UNSUPPORTED", Status: http.StatusMethodNotAllowed}
	codeBusy             = errorCode{Value: "GC_BUSY", Status: http.StatusConflict, RetryAfter: retryAfterConflict}
	codeDeleting         = errorCode{Value: "GC_DELETING", Status: http.StatusConflict, RetryAfter: retryAfterConflict}
	codePinUnknown       = errorCode{Value: "PIN_UNKNOWN", Status: http.StatusNotFound}
	codeSourceUnknown    = errorCode{Value: "SOURCE_UNKNOWN", Status: http.StatusNotFound}
	codeManifestUnknown  = errorCode{Value: "MANIFEST_UNKNOWN", Status: http.StatusNotFound}
	codeUsageUnknown     = errorCode{Value: "USAGE_UNKNOWN", Status: http.StatusNotFound}
	codeRetentionAborted = errorCode{Value: "RETENTION_ABORTED", Status: http.StatusServiceUnavailable, RetryAfter: reclaim.RetryAfterUnavailable}
	codePlanExpired      = errorCode{Value: "PLAN_EXPIRED", Status: http.StatusConflict, RetryAfter: retryAfterConflict}
	codePolicyChanged    = errorCode{Value: "POLICY_CHANGED", Status: http.StatusConflict, RetryAfter: retryAfterConflict}
	codePlanSkipped      = errorCode{Value: "PLAN_SKIPPED", Status: http.StatusConflict, RetryAfter: retryAfterConflict}
	codeSizeInvalid      = errorCode{Value: "SIZE_INVALID", Status: http.StatusRequestEntityTooLarge}
	codeTooMany          = errorCode{Value: "TOO_MANY_REQUESTS", Status: http.StatusTooManyRequests, RetryAfter: retryAfterBusy}
	codeAborted          = errorCode{Value: "GC_ABORTED", Status: http.StatusServiceUnavailable, RetryAfter: reclaim.RetryAfterUnavailable}
	codeUnavailable      = errorCode{Value: "UNAVAILABLE", Status: http.StatusServiceUnavailable, RetryAfter: reclaim.RetryAfterUnavailable}
	codeUnknown          = errorCode{Value: "UNKNOWN", Status: http.StatusInternalServerError, Message: "internal error"}
)

// codedError is an error of this package: it carries its code.
type codedError struct {
	code errorCode
	msg  string
}

func (e *codedError) Error() string { return e.msg }

// err is a new error of code c.
func (c errorCode) err(msg string) error { return &codedError{code: c, msg: msg} }

// Request errors the HTTP layer itself raises.
var (
	errBadRequest      = codeParamInvalid.err("bad request")
	errTooLarge        = codeSizeInvalid.err("request body too large")
	errMethod          = codeUnsupported.err("method not allowed")
	errNotFound        = codeNotFound.err("no such endpoint")
	errRunNotFound     = codeRunUnknown.err("run not found or expired")
	errUsageUnknown    = codeUsageUnknown.err("no usage estimate yet: ask with ?refresh=true, or wait for the reclaimer's refresh")
	errUnauthenticated = codeUnauthorized.err("authentication required")
	errPolicyOverride  = codePolicyOverride.err("the request would loosen the registry's configured policy")
)

// ErrDigestAlgorithm refuses a link under a digest algorithm other than
// sha256 (the registry's sha256-only check answers it with WriteError).
var ErrDigestAlgorithm = codeDigestInvalid.err("only sha256 digests are supported: online garbage collection cannot protect the blob behind a link under another digest algorithm")

// sentinels gives the errors of the packages below (which know nothing of
// HTTP) their codes. message, when set, replaces the error's text.
var sentinels = []struct {
	err     error
	code    errorCode
	message string
}{
	{err: collector.ErrInvalidName, code: codeNameInvalid},
	{err: collector.ErrRepositoryNotFound, code: codeNameUnknown},
	// Never say whose plan it is: the handlers answer as for an unknown
	// id (planUnknown); this is the fallback, without the message.
	{err: collector.ErrPlanRepository, code: codePlanUnknown, message: collector.ErrPlanNotInMemory.Error()},
	{err: collector.ErrPlanNotInMemory, code: codePlanUnknown},
	{err: collector.ErrNoUsageStore, code: codeUnsupported},
	{err: collector.ErrDisabled, code: codeUnsupported},
	{err: collector.ErrTooManyDryRuns, code: codeTooMany},
	{err: reclaim.ErrRepositoryBusy, code: codeBusy},
	{err: reclaim.ErrTrackerUnavailable, code: codeUnavailable},
	{err: retention.ErrPlanNotFound, code: codePlanUnknown},
	{err: retention.ErrPlanExpired, code: codePlanExpired},
	{err: retention.ErrPolicyChanged, code: codePolicyChanged},
	{err: retention.ErrPlanSkipped, code: codePlanSkipped},
	{err: pin.ErrExpired, code: codePinExpired},
	{err: pin.ErrInvalidDigest, code: codeDigestInvalid},
	{err: pin.ErrInvalid, code: codeParamInvalid},
	{err: retention.ErrInvalid, code: codeParamInvalid},
	{err: inuse.ErrInvalid, code: codeParamInvalid},
	{err: pin.ErrNotFound, code: codePinUnknown},
	{err: retention.ErrSourceNotFound, code: codeSourceUnknown},
	{err: retention.ErrUnavailable, code: codeUnavailable},
	// 403, not 401: the credentials may be fine; the page that sent them
	// is not the registry's (crosssite.go).
	{err: crosssite.ErrRefused, code: codeCrossSite},
	{err: auth.ErrInvalidCredential, code: codeUnauthorized},
	{err: auth.ErrAuthenticationFailure, code: codeUnauthorized},
}

// codeOf finds the code of err: that of the outermost error in its chain
// that has one (an error of this package, an abort, or one of the
// sentinels), or UNKNOWN. detail is what the body's "detail" says.
func codeOf(err error) (c errorCode, message string, detail any) {
	for err != nil {
		switch e := err.(type) {
		case *codedError:
			return e.code, "", nil
		case *collector.AbortError:
			// the registry cannot vouch for its access records (or read
			// the repository) right now; retrying later can succeed
			return codeAborted, "", map[string]string{"reason": e.Reason.String()}
		case *retention.AbortError:
			return codeRetentionAborted, "", map[string]string{"reason": e.Reason.String()}
		}
		for _, s := range sentinels {
			if err == s.err {
				return s.code, s.message, nil
			}
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if c, message, detail := codeOf(e); c != codeUnknown {
					return c, message, detail
				}
			}
			return codeUnknown, "", nil
		default:
			err = nil
		}
	}
	return codeUnknown, "", nil
}

// statusOf is the one place errors become HTTP statuses and bodies: the
// code err carries and its status.
func statusOf(err error) (int, apiError) {
	c, body := answerOf(err)
	return c.Status, body
}

// answerOf is err's code and the body that answers it.
func answerOf(err error) (errorCode, apiError) {
	c, message, detail := codeOf(err)
	switch {
	case c.Message != "":
		message = c.Message
	case message == "":
		message = err.Error()
	}
	return c, apiError{Code: c.Value, Message: message, Detail: detail}
}

// WriteError writes err as a Distribution-style JSON error body, with the
// Retry-After of its code. An auth challenge sets its own headers
// (WWW-Authenticate) first.
func WriteError(w http.ResponseWriter, r *http.Request, err error) {
	var ch auth.Challenge
	if errors.As(err, &ch) {
		ch.SetHeaders(r, w)
		err = fmt.Errorf("%w: %v", errUnauthenticated, err)
	}
	c, body := answerOf(err)
	if c.Status == http.StatusInternalServerError {
		logrus.WithError(err).WithField("path", r.URL.Path).Error("reclaim: gc api")
	}
	if c.RetryAfter != "" {
		w.Header().Set("Retry-After", c.RetryAfter)
	}
	writeJSON(w, c.Status, map[string][]apiError{"errors": {body}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
