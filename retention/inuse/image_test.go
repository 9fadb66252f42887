package inuse

import (
	"testing"

	"github.com/opencontainers/go-digest"
)

func TestSortImages(t *testing.T) {
	a, b := digest.FromString("a"), digest.FromString("b")
	got := SortImages([]Image{{"z", a}, {"a", b}, {"z", a}, {"a", a}})
	if len(got) != 3 || got[0].String() > got[1].String() || got[1].String() > got[2].String() {
		t.Fatalf("%v", got)
	}
}
