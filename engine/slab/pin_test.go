package slab

import (
	"bytes"
	"testing"

	"github.com/dfkv/dfkv/engine/enginetest"
	"github.com/dfkv/dfkv/wire"
)

// TestPinSurvivesEvictionAndRemove: a pinned value stays readable through
// pressure that evicts everything else written with it; a REMOVE of it
// hides it at once but frees its slot only at Unpin; spanned values and
// misses are not pinned.
func TestPinSurvivesEvictionAndRemove(t *testing.T) {
	s := openT(t, Options{Dir: t.TempDir(), CapacityBytes: 64 << 20, ExtentBytes: 4 << 20, DirectIO: true})
	defer mustClose(t, s)
	val := func(i int) []byte { return enginetest.Value(uint64(i), 256<<10) }
	pinned, control := enginetest.Key(1), enginetest.Key(2)
	mustCache(t, s, pinned, val(1))
	mustCache(t, s, control, val(2))
	loan, ok := s.Pin(pinned)
	if !ok {
		t.Fatal("Pin of a stored value refused")
	}
	for i := 10; i < 10+4*256; i++ { // four times the capacity
		mustCache(t, s, enginetest.Key(i), val(i))
	}
	if got, err := get(t, s, pinned); err != nil || !bytes.Equal(got, val(1)) {
		t.Fatalf("the pinned value after the pressure: %v", err)
	}
	if _, err := get(t, s, control); wire.StatusOf(err) != wire.StatusNotFound {
		t.Fatalf("the unpinned control survived (%v): the pressure evicted nothing, so the test proves nothing", err)
	}
	if err := s.Remove(pinned); err != nil {
		t.Fatal(err)
	}
	if _, err := get(t, s, pinned); wire.StatusOf(err) != wire.StatusNotFound {
		t.Fatalf("a removed pinned value still reads: %v", err)
	}
	s.Unpin(loan)
	if _, ok := s.Pin(enginetest.Key(999999)); ok {
		t.Fatal("Pin of a miss succeeded")
	}
	big := enginetest.Key(5)
	mustCache(t, s, big, enginetest.Value(5, 9<<20)) // spans three extents
	if _, ok := s.Pin(big); ok {
		t.Fatal("a value spanning extents was pinned")
	}
	checkAlloc(t, s)
}
