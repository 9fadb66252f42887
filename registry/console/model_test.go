package console

import "testing"

// floorBytes never rounds up; humanBytes rounds to the nearest tenth.
func TestFloorBytes(t *testing.T) {
	for _, c := range []struct {
		n           int64
		floor, near string
	}{
		{0, "0 B", "0 B"},
		{1023, "1023 B", "1023 B"},
		{1024, "1.0 KiB", "1.0 KiB"},
		{2047, "1.9 KiB", "2.0 KiB"},
		{1<<20 - 1, "1023.9 KiB", "1024.0 KiB"},
		{5 << 30, "5.0 GiB", "5.0 GiB"},
	} {
		if got := floorBytes(c.n); got != c.floor {
			t.Errorf("floorBytes(%d) = %q, want %q", c.n, got, c.floor)
		}
		if got := humanBytes(c.n); got != c.near {
			t.Errorf("humanBytes(%d) = %q, want %q", c.n, got, c.near)
		}
	}
}
