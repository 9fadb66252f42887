package inuse

import (
	"errors"
	"fmt"
)

// Errors of a scan. The text is the one the CLI has always printed: the
// in-use index is part of retention, and its operators read that word.
var (
	// ErrInvalid: a scanned file, tree or image reference is malformed,
	// or the scan refused to follow it.
	ErrInvalid = errors.New("retention: invalid request")
	// ErrTooLarge: a scanned file or stream passed its limit (an ErrInvalid).
	ErrTooLarge = fmt.Errorf("%w: too large", ErrInvalid)
)
