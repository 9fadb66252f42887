package pin

import (
	"errors"
	"fmt"
)

// Errors callers branch on; the registry maps them to HTTP statuses.
var (
	// ErrInvalid: a pin or a reference is malformed.
	ErrInvalid = errors.New("retention: invalid pin or reference")
	// ErrExpired: a pin's expiry is not in the future, or passed before
	// the pin was stored and checked: it protects nothing (an ErrInvalid).
	ErrExpired = fmt.Errorf("%w: the pin's expiry has passed", ErrInvalid)
	// ErrInvalidDigest: a reference that can only be meant as a digest (it
	// holds a ':', which no tag does) is not one (an ErrInvalid).
	ErrInvalidDigest = fmt.Errorf("%w: invalid digest", ErrInvalid)
	// ErrNotFound: the repository has no such pin (or it expired).
	ErrNotFound = errors.New("retention: pin not found")
)
