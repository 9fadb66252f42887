package inuse

import (
	"errors"
	"fmt"
)

// Errors of a scan. The text names the scan, and each error then names the
// file: "in-use scan: deploy/app.yaml:12: ...".
var (
	// ErrInvalid: a scanned file, tree or image reference is malformed,
	// or the scan refused to follow it.
	ErrInvalid = errors.New("in-use scan")
	// ErrTooLarge: a scanned file or stream passed its limit (an ErrInvalid).
	ErrTooLarge = fmt.Errorf("%w: too large", ErrInvalid)
)
