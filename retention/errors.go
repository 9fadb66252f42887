package retention

import (
	"errors"
	"fmt"
)

// Errors callers branch on; the registry maps them to HTTP statuses.
var (
	// ErrInvalid: a pin, a reference or a source is malformed.
	ErrInvalid = errors.New("retention: invalid request")
	// ErrPinExpired: a pin's expiry is not in the future, or passed
	// before the pin was stored and checked: it protects nothing (an
	// ErrInvalid).
	ErrPinExpired = fmt.Errorf("%w: the pin's expiry has passed", ErrInvalid)
	// ErrInvalidDigest: a reference that can only be meant as a digest (it
	// holds a ':', which no tag does) is not one (an ErrInvalid).
	ErrInvalidDigest = fmt.Errorf("%w: invalid digest", ErrInvalid)
	// ErrPinNotFound: the repository has no such pin (or it expired).
	ErrPinNotFound = errors.New("retention: pin not found")
	// ErrSourceNotFound: no such in-use source.
	ErrSourceNotFound = errors.New("retention: in-use source not found")
	// ErrUnavailable: the store (Redis) cannot be read or written now.
	ErrUnavailable = errors.New("retention: store unavailable")
)
