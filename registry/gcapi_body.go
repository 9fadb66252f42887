package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// readJSON decodes the body of a pin or in-use request into v: one JSON
// object with known fields and nothing after it, at most limit bytes. An
// empty body leaves v as it is.
func readJSON(r *http.Request, limit int64, v any) error {
	b, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return fmt.Errorf("%w: read body: %v", errBadRequest, err)
	}
	if int64(len(b)) > limit {
		return fmt.Errorf("%w: over %d bytes", errTooLarge, limit)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: body: %v", errBadRequest, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: body: data after the JSON object", errBadRequest)
	}
	return nil
}
