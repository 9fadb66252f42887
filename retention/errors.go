package retention

import "errors"

// Errors callers branch on; the registry maps them to HTTP statuses.
var (
	// ErrInvalid: a policy, a plan id, an in-use source or its images are
	// malformed (a pin's errors are package pin's).
	ErrInvalid = errors.New("retention: invalid request")
	// ErrSourceNotFound: no such in-use source.
	ErrSourceNotFound = errors.New("retention: in-use source not found")
	// ErrUnavailable: the store (Redis) cannot be read or written now.
	ErrUnavailable = errors.New("retention: store unavailable")
)
