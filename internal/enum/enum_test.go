package enum

import (
	"encoding/json"
	"strings"
	"testing"
)

type color int

const (
	red color = iota + 1
	green
)

var colors = New("enum.color", Pair[color]{red, "red"}, Pair[color]{green, "green"})

func (c color) String() string                { return colors.String(c) }
func (c color) MarshalText() ([]byte, error)  { return colors.MarshalText(c) }
func (c *color) UnmarshalText(b []byte) error { return colors.UnmarshalText(b, c) }

type word string

var words = Strings[word]("enum.word", "a", "b")

func TestSet(t *testing.T) {
	if red.String() != "red" || color(9).String() != "enum.color(9)" || !colors.Valid(green) || colors.Valid(0) {
		t.Fatal("names")
	}
	b, err := json.Marshal(map[string]color{"c": green})
	if err != nil || string(b) != `{"c":"green"}` {
		t.Fatalf("%s %v", b, err)
	}
	if _, err := json.Marshal(color(0)); err == nil {
		t.Fatal("the zero value marshalled")
	}
	var c color
	if err := json.Unmarshal([]byte(`"red"`), &c); err != nil || c != red {
		t.Fatalf("%v %v", c, err)
	}
	err = json.Unmarshal([]byte(`"blue"`), &c)
	if err == nil || !strings.Contains(err.Error(), `unknown enum.color "blue" (one of red, green)`) {
		t.Fatalf("%v", err)
	}
	if v, err := words.Parse("b"); err != nil || v != "b" || len(words.Values()) != 2 {
		t.Fatalf("%v %v", v, err)
	}
	if _, err := words.Parse("c"); err == nil {
		t.Fatal("c parsed")
	}
}

func TestDuplicatePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	Strings[word]("enum.word", "a", "a")
}
