package registry

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
)

// The one strict reading of a JSON request body, for every endpoint that
// takes one (collect's options, pins, the in-use index, retention).
// encoding/json alone matches "KEEP_NEWEST" to keep_newest and lets the
// last of two "keep_newest" win, so {"keep_newest":5,"keep_newest":0}
// would run with 0. Here, in every object of the body:
//
//   - a key must be a field's name exactly as documented, else it is an
//     unknown field;
//   - a key may be given once;
//
// and the body is one JSON object with nothing after it. Each is a 400.

// strictBody walks body, one JSON object: object reads its fields once dec
// has consumed the '{' (with strictFields). An empty (or all-space) body
// is no object: object is not called.
func strictBody(body []byte, object func(dec *json.Decoder) error) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	tok, err := dec.Token()
	if errors.Is(err, io.EOF) {
		return nil
	}
	if err != nil {
		return badBody("%v", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return badBody("want a JSON object")
	}
	if err := object(dec); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return badBody("data after the JSON object")
	}
	return nil
}

// strictFields reads the fields of the object whose '{' dec has consumed,
// and its '}'. field returns how to read a key's value, or false when the
// key is not one of the object's fields as spelled.
func strictFields(dec *json.Decoder, where string, field func(key string) (read func() error, ok bool)) error {
	var seen []string // an object has a few keys
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return badBody("%s%v", where, err)
		}
		key, ok := tok.(string)
		if !ok {
			return badBody("%swant a field name, got %v", where, tok)
		}
		read, ok := field(key)
		if !ok {
			return badBody("%sunknown field %q", where, key)
		}
		if slices.Contains(seen, key) {
			return badBody("%sfield %q given twice", where, key)
		}
		seen = append(seen, key)
		if err := read(); err != nil {
			return err
		}
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return badBody("%sunterminated object (%v)", where, err)
	}
	return nil
}

func badBody(format string, a ...any) error {
	return fmt.Errorf("%w: body: %s", errBadRequest, fmt.Sprintf(format, a...))
}

// readJSON decodes the body of a pin, in-use or retention request into v,
// a pointer to a struct: one JSON object, read strictly (above), at most
// limit bytes. An empty body leaves v as it is.
func readJSON(r *http.Request, limit int64, v any) error {
	b, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return fmt.Errorf("%w: read body: %v", errBadRequest, err)
	}
	if int64(len(b)) > limit {
		return fmt.Errorf("%w: over %d bytes", errTooLarge, limit)
	}
	t := reflect.TypeOf(v).Elem()
	err = strictBody(b, func(dec *json.Decoder) error { return checkFields(dec, t, "") })
	if err != nil || len(bytes.TrimSpace(b)) == 0 {
		return err
	}
	// The keys are checked; encoding/json checks the types.
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: body: %v", errBadRequest, err)
	}
	return nil
}

var (
	unmarshalerType     = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// checkValue walks the next JSON value of dec as a value of type t: the
// objects of struct types (and maps) strictly, the elements of slices and
// arrays as t's elements. A value of a type that decodes itself (a
// time.Time, a retention.Duration) or of the wrong JSON type (encoding/json
// refuses it afterwards) is only skipped.
func checkValue(dec *json.Decoder, t reflect.Type, where string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	tok, err := dec.Token()
	if err != nil {
		return badBody("%s%v", where, err)
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil // a scalar or null
	}
	custom := reflect.PointerTo(t).Implements(unmarshalerType) || reflect.PointerTo(t).Implements(textUnmarshalerType)
	switch {
	case d == '{' && !custom && (t.Kind() == reflect.Struct || t.Kind() == reflect.Map):
		return checkFields(dec, t, where)
	case d == '[' && !custom && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array):
		for i := 0; dec.More(); i++ {
			if err := checkValue(dec, t.Elem(), fmt.Sprintf("%s[%d]: ", strings.TrimSuffix(where, ": "), i)); err != nil {
				return err
			}
		}
		if _, err := dec.Token(); err != nil {
			return badBody("%s%v", where, err)
		}
		return nil
	}
	return skip(dec, 1)
}

// checkFields reads an object of struct (or map) type t whose '{' dec has
// consumed: a struct's keys are its fields' JSON names exactly, a map's
// any; in both, each key once.
func checkFields(dec *json.Decoder, t reflect.Type, where string) error {
	var names map[string]reflect.Type
	if t.Kind() == reflect.Struct {
		names = fieldsOf(t)
	}
	return strictFields(dec, where, func(key string) (func() error, bool) {
		ft, ok := names[key]
		if t.Kind() == reflect.Map {
			ft, ok = t.Elem(), true
		}
		return func() error { return checkValue(dec, ft, where+key+": ") }, ok
	})
}

// fieldNames caches fieldsOf: an in-use upload has 100,000 objects of one
// type.
var fieldNames sync.Map // reflect.Type -> map[string]reflect.Type

// fieldsOf maps the JSON names of struct t's fields to their types.
func fieldsOf(t reflect.Type) map[string]reflect.Type {
	if m, ok := fieldNames.Load(t); ok {
		return m.(map[string]reflect.Type)
	}
	m := jsonFields(t, map[string]reflect.Type{})
	fieldNames.Store(t, m)
	return m
}

// jsonFields adds the JSON names of struct t's fields to names, with the
// fields of embedded structs as encoding/json promotes them.
func jsonFields(t reflect.Type, names map[string]reflect.Type) map[string]reflect.Type {
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() && !f.Anonymous {
			continue
		}
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if f.Anonymous && name == "" && ft.Kind() == reflect.Struct {
			jsonFields(ft, names)
			continue
		}
		if name == "" {
			name = f.Name
		}
		names[name] = f.Type
	}
	return names
}

// skip reads tokens until depth open delimiters are closed.
func skip(dec *json.Decoder, depth int) error {
	for depth > 0 {
		tok, err := dec.Token()
		if err != nil {
			return badBody("%v", err)
		}
		if d, ok := tok.(json.Delim); ok {
			if d == '{' || d == '[' {
				depth++
			} else {
				depth--
			}
		}
	}
	return nil
}
