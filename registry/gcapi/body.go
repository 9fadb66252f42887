package gcapi

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
	return strictStream(bytes.NewReader(body), object)
}

// strictStream is strictBody on a stream.
func strictStream(body io.Reader, object func(dec *json.Decoder) error) error {
	dec := json.NewDecoder(body)
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
		key, err := nextKey(dec, where, seen)
		if err != nil {
			return err
		}
		read, ok := field(key)
		if !ok {
			return badBody("%sunknown field %q", where, key)
		}
		seen = append(seen, key)
		if err := read(); err != nil {
			return err
		}
	}
	return endObject(dec, where)
}

// nextKey reads the next key of an object (at is where the object is, a
// string or a *where): a field name, not one of seen.
func nextKey(dec *json.Decoder, at any, seen []string) (string, error) {
	tok, err := dec.Token()
	if err != nil {
		return "", badBody("%s%v", at, err)
	}
	key, ok := tok.(string)
	if !ok {
		return "", badBody("%swant a field name, got %v", at, tok)
	}
	if slices.Contains(seen, key) {
		return "", badBody("%sfield %q given twice", at, key)
	}
	return key, nil
}

// endObject reads the '}' that ends an object.
func endObject(dec *json.Decoder, at any) error {
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return badBody("%sunterminated object (%v)", at, err)
	}
	return nil
}

func badBody(format string, a ...any) error {
	return fmt.Errorf("%w: body: %s", errBadRequest, fmt.Sprintf(format, a...))
}

// readJSON decodes the body of a pin, in-use or retention request into v,
// a pointer to a struct: one JSON object, read strictly (above), at most
// limit bytes. An empty body leaves v as it is.
//
// It decodes as it reads, in one pass and without a copy of the body: the
// objects and arrays of v's type are walked token by token (strictly),
// and only their leaves (a string, a number, a time) go to encoding/json,
// one at a time. json.Decoder.Decode of the whole object would first
// buffer all of it, and an in-use upload is up to 32 MiB.
func readJSON(r *http.Request, limit int64, v any) error {
	if r.ContentLength > limit {
		return fmt.Errorf("%w: over %d bytes", errTooLarge, limit)
	}
	body := &io.LimitedReader{R: r.Body, N: limit + 1}
	rv := reflect.ValueOf(v).Elem()
	err := strictStream(body, func(dec *json.Decoder) error { return decodeFields(dec, rv, nil) })
	if body.N <= 0 {
		return fmt.Errorf("%w: over %d bytes", errTooLarge, limit)
	}
	return err
}

var (
	unmarshalerType     = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// leaf reports whether a value of type t is decoded by encoding/json as a
// whole: a scalar, an interface, or a type that decodes itself (a
// time.Time, a retention.Duration). Objects and arrays of every other
// type are walked strictly.
func leaf(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		if t.Implements(unmarshalerType) || t.Implements(textUnmarshalerType) {
			return true
		}
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) || reflect.PointerTo(t).Implements(textUnmarshalerType) {
		return true
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map, reflect.Slice, reflect.Array:
		return false
	}
	return true
}

// where is the place in the body a value is at, for errors: "items[1]:
// name: ". It is built only when an error names it; a chain of them lives
// on the stack.
type where struct {
	up    *where
	key   string // or, when up is a slice: index
	index int
	elem  bool
}

func (w *where) String() string {
	if w == nil {
		return ""
	}
	if w.elem {
		return fmt.Sprintf("%s[%d]: ", strings.TrimSuffix(w.up.String(), ": "), w.index)
	}
	return w.up.String() + w.key + ": "
}

// decodeValue decodes the next JSON value of dec into v (settable),
// walking objects and arrays strictly.
func decodeValue(dec *json.Decoder, v reflect.Value, at *where) error {
	if leaf(v.Type()) {
		if err := dec.Decode(v.Addr().Interface()); err != nil {
			return badBody("%s%v", at, err)
		}
		return nil
	}
	tok, err := dec.Token()
	if err != nil {
		return badBody("%s%v", at, err)
	}
	if tok == nil { // null: as encoding/json, nil for a pointer, slice or map
		if k := v.Kind(); k == reflect.Pointer || k == reflect.Slice || k == reflect.Map {
			v.SetZero()
		}
		return nil
	}
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		v = v.Elem()
	}
	d, _ := tok.(json.Delim)
	array := v.Kind() == reflect.Slice || v.Kind() == reflect.Array
	switch {
	case d == '{' && (v.Kind() == reflect.Struct || v.Kind() == reflect.Map):
		return decodeFields(dec, v, at)
	case d == '[' && array:
		return decodeElements(dec, v, at)
	}
	return badBody("%sgot %v, want a JSON %s", at, tok, map[bool]string{true: "array", false: "object"}[array])
}

// decodeElements decodes the elements of the array whose '[' dec has
// consumed into v, a slice (replaced) or an array (the rest zeroed, extra
// elements dropped, as encoding/json does), and its ']'.
func decodeElements(dec *json.Decoder, v reflect.Value, at *where) error {
	slice := v.Kind() == reflect.Slice
	if slice {
		v.Set(reflect.MakeSlice(v.Type(), 0, 0))
	}
	i := 0
	for ; dec.More(); i++ {
		elem := &where{up: at, index: i, elem: true}
		switch {
		case slice:
			if v.Len() == v.Cap() {
				v.Grow(1)
			}
			v.SetLen(i + 1)
			if err := decodeValue(dec, v.Index(i), elem); err != nil {
				return err
			}
		case i < v.Len():
			if err := decodeValue(dec, v.Index(i), elem); err != nil {
				return err
			}
		default:
			var skip json.RawMessage // small: the body is bounded, and so is one element
			if err := dec.Decode(&skip); err != nil {
				return badBody("%s%v", elem, err)
			}
		}
	}
	for ; !slice && i < v.Len(); i++ {
		v.Index(i).SetZero()
	}
	if _, err := dec.Token(); err != nil {
		return badBody("%s%v", at, err)
	}
	return nil
}

// decodeFields decodes the object whose '{' dec has consumed into v, a
// struct or a map, and its '}': a struct's keys are its fields' JSON names
// exactly, a map's any string; in both, each key once.
func decodeFields(dec *json.Decoder, v reflect.Value, at *where) error {
	t := v.Type()
	var names map[string][]int
	switch {
	case t.Kind() == reflect.Struct:
		names = fieldsOf(t)
	case t.Key().Kind() != reflect.String:
		return badBody("%sa map keyed by %s is not a body type", at, t.Key())
	case v.IsNil():
		v.Set(reflect.MakeMap(t))
	}
	var seenOn [8]string // most objects have a few keys
	seen := seenOn[:0]
	for dec.More() {
		key, err := nextKey(dec, at, seen)
		if err != nil {
			return err
		}
		index, ok := names[key]
		if !ok && names != nil {
			return badBody("%sunknown field %q", at, key)
		}
		seen = append(seen, key)
		field := &where{up: at, key: key}
		if names != nil {
			if err := decodeValue(dec, fieldByIndex(v, index), field); err != nil {
				return err
			}
			continue
		}
		e := reflect.New(t.Elem()).Elem()
		if err := decodeValue(dec, e, field); err != nil {
			return err
		}
		v.SetMapIndex(reflect.ValueOf(key).Convert(t.Key()), e)
	}
	return endObject(dec, at)
}

// fieldByIndex is v.FieldByIndex, allocating embedded struct pointers on
// the way.
func fieldByIndex(v reflect.Value, index []int) reflect.Value {
	for i, x := range index {
		if i > 0 && v.Kind() == reflect.Pointer {
			if v.IsNil() {
				v.Set(reflect.New(v.Type().Elem()))
			}
			v = v.Elem()
		}
		v = v.Field(x)
	}
	return v
}

// fieldNames caches fieldsOf: an in-use upload has 100,000 objects of one
// type.
var fieldNames sync.Map // reflect.Type -> map[string][]int

// fieldsOf maps the JSON names of struct t's fields to their indexes
// (reflect.Value.FieldByIndex).
func fieldsOf(t reflect.Type) map[string][]int {
	if m, ok := fieldNames.Load(t); ok {
		return m.(map[string][]int)
	}
	m := jsonFields(t, nil, map[string][]int{})
	fieldNames.Store(t, m)
	return m
}

// jsonFields adds the JSON names of struct t's fields, below index at, to
// names, with the fields of embedded structs as encoding/json promotes
// them.
func jsonFields(t reflect.Type, at []int, names map[string][]int) map[string][]int {
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() && !f.Anonymous {
			continue
		}
		index := append(slices.Clone(at), i)
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if f.Anonymous && name == "" && ft.Kind() == reflect.Struct {
			jsonFields(ft, index, names)
			continue
		}
		if name == "" {
			name = f.Name
		}
		names[name] = index
	}
	return names
}
