package budget

import (
	"errors"
	"net/http"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"google.golang.org/api/googleapi"
)

// throttleCodes are the error codes object stores answer a request rate
// they refuse with (S3 and the AWS SDKs; Azure's ServerBusy).
var throttleCodes = map[string]bool{
	"SlowDown": true, "Throttling": true, "ThrottlingException": true, "ThrottledException": true,
	"RequestLimitExceeded": true, "TooManyRequests": true, "TooManyRequestsException": true,
	"RequestThrottled": true, "RequestThrottledException": true, "ServerBusy": true,
}

// Throttled reports whether err is the store refusing a request rate: an
// HTTP 503 or 429 (AWS SDK v1 and v2 errors, googleapi.Error,
// azcore.ResponseError), an error code in throttleCodes, or an error that
// says it is retryable (RetryableError() true). Distribution's
// storagedriver.Error, which does not unwrap, is looked into.
func Throttled(err error) bool {
	for err != nil {
		var de storagedriver.Error
		if errors.As(err, &de) {
			if throttledOne(err) {
				return true
			}
			err = de.Detail
			continue
		}
		return throttledOne(err)
	}
	return false
}

func throttledOne(err error) bool {
	var (
		status  interface{ StatusCode() int }
		status2 interface{ HTTPStatusCode() int }
		code    interface{ Code() string }
		code2   interface{ ErrorCode() string }
		retry   interface{ RetryableError() bool }
		gerr    *googleapi.Error
		aerr    *azcore.ResponseError
	)
	switch {
	case errors.As(err, &status) && throttleStatus(status.StatusCode()),
		errors.As(err, &status2) && throttleStatus(status2.HTTPStatusCode()),
		errors.As(err, &code) && throttleCodes[code.Code()],
		errors.As(err, &code2) && throttleCodes[code2.ErrorCode()],
		errors.As(err, &retry) && retry.RetryableError(),
		errors.As(err, &gerr) && throttleStatus(gerr.Code),
		errors.As(err, &aerr) && (throttleStatus(aerr.StatusCode) || throttleCodes[aerr.ErrorCode]):
		return true
	}
	return false
}

func throttleStatus(code int) bool {
	return code == http.StatusServiceUnavailable || code == http.StatusTooManyRequests
}
