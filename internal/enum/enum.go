// Package enum is the one shape of the project's closed sets of words (why
// an object is kept, why a run aborts, why a repository is skipped, what a
// link-database finding is, why Redis lost state): a table of names for
// the values of a type, in a fixed order. A type of such a set keeps its
// table in a Set and forwards String, MarshalText and UnmarshalText to it,
// so every set prints, marshals and parses the same way: a value outside
// the table does not marshal, and a name outside it does not parse.
package enum

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// Set is the table of one closed set: each value of T with its name.
type Set[T comparable] struct {
	what   string // the type's name, for errors: "reclaim.Reason"
	values []T
	names  map[T]string
	byName map[string]T
}

// Pair is one value of a set and its name.
type Pair[T comparable] struct {
	Value T
	Name  string
}

// New builds the set of pairs, in order; what names the type in errors.
// A value or name given twice is a programming error: New panics.
func New[T comparable](what string, pairs ...Pair[T]) *Set[T] {
	s := &Set[T]{what: what, names: map[T]string{}, byName: map[string]T{}}
	for _, p := range pairs {
		if _, dup := s.names[p.Value]; dup {
			panic(fmt.Sprintf("enum: %s: value %v given twice", what, p.Value))
		}
		if _, dup := s.byName[p.Name]; dup {
			panic(fmt.Sprintf("enum: %s: name %q given twice", what, p.Name))
		}
		s.values = append(s.values, p.Value)
		s.names[p.Value] = p.Name
		s.byName[p.Name] = p.Value
	}
	return s
}

// Strings builds the set of a string type whose values are their names.
func Strings[T ~string](what string, values ...T) *Set[T] {
	pairs := make([]Pair[T], len(values))
	for i, v := range values {
		pairs[i] = Pair[T]{Value: v, Name: string(v)}
	}
	return New(what, pairs...)
}

// Values lists the set's values in table order (a copy).
func (s *Set[T]) Values() []T { return append([]T(nil), s.values...) }

// Valid reports whether v is in the set.
func (s *Set[T]) Valid(v T) bool {
	_, ok := s.names[v]
	return ok
}

// String is v's name; a value outside the set prints as what(v).
func (s *Set[T]) String(v T) string {
	if n, ok := s.names[v]; ok {
		return n
	}
	return s.what + "(" + raw(v) + ")"
}

// MarshalText encodes v's name; a value outside the set is an error.
func (s *Set[T]) MarshalText(v T) ([]byte, error) {
	n, ok := s.names[v]
	if !ok {
		return nil, fmt.Errorf("invalid %s %s", s.what, raw(v))
	}
	return []byte(n), nil
}

// Parse returns the value named name; any other name is an error that
// lists the valid ones.
func (s *Set[T]) Parse(name string) (T, error) {
	v, ok := s.byName[name]
	if !ok {
		names := make([]string, len(s.values))
		for i, v := range s.values {
			names[i] = s.names[v]
		}
		return v, fmt.Errorf("unknown %s %q (one of %s)", s.what, name, strings.Join(names, ", "))
	}
	return v, nil
}

// UnmarshalText decodes a name into *v, strictly (Parse).
func (s *Set[T]) UnmarshalText(b []byte, v *T) error {
	p, err := s.Parse(string(b))
	if err != nil {
		return err
	}
	*v = p
	return nil
}

// raw prints v as its underlying value: v's own String would call back
// into the set.
func raw(v any) string {
	rv := reflect.ValueOf(v)
	switch {
	case rv.CanInt():
		return strconv.FormatInt(rv.Int(), 10)
	case rv.CanUint():
		return strconv.FormatUint(rv.Uint(), 10)
	case rv.Kind() == reflect.String:
		return strconv.Quote(rv.String())
	}
	return rv.Type().String()
}
