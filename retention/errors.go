package retention

import (
	"errors"
	"fmt"
)

// Errors callers branch on; the registry maps them to HTTP statuses.
var (
	// ErrInvalid: a pin, a reference or a source is malformed.
	ErrInvalid = errors.New("retention: invalid request")
	// ErrTooLarge: a scanned file or stream passed its limit (an ErrInvalid).
	ErrTooLarge = fmt.Errorf("%w: too large", ErrInvalid)
	// ErrPinNotFound: the repository has no such pin (or it expired).
	ErrPinNotFound = errors.New("retention: pin not found")
	// ErrSourceNotFound: no such in-use source.
	ErrSourceNotFound = errors.New("retention: in-use source not found")
	// ErrUnavailable: the store (Redis) cannot be read or written now.
	ErrUnavailable = errors.New("retention: store unavailable")
)
