package wire

import "testing"

// TestRangeLen: the range contract's arithmetic, case by case.
func TestRangeLen(t *testing.T) {
	for _, c := range []struct {
		stored, offset, length, want uint64
		ok                           bool
	}{
		{stored: 10, offset: 0, length: 0, want: 10, ok: true},  // whole value
		{stored: 10, offset: 3, length: 0, want: 7, ok: true},   // the remainder
		{stored: 10, offset: 3, length: 4, want: 4, ok: true},   // inside
		{stored: 10, offset: 3, length: 100, want: 7, ok: true}, // clamped
		{stored: 10, offset: 10, length: 5, want: 0, ok: true},  // at the end: nothing, successfully
		{stored: 10, offset: 11, length: 0, want: 0, ok: false}, // past the end: INVALID
	} {
		if got, ok := RangeLen(c.stored, c.offset, c.length); got != c.want || ok != c.ok {
			t.Errorf("RangeLen(%d, %d, %d) = %d, %v; want %d, %v", c.stored, c.offset, c.length, got, ok, c.want, c.ok)
		}
	}
}
