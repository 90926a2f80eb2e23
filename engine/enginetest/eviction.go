package enginetest

import (
	"testing"

	"github.com/dfkv/dfkv/wire"
)

// evictSize is the value size of the eviction tests: one alignment block,
// so every engine accounts it the same.
const evictSize = 4096

// testEviction fills an engine to several times its capacity: every Put
// succeeds, the bytes in use never pass the capacity, and what is left is
// exactly what Stats says.
func testEviction(t *testing.T, open Opener) {
	const slots = 64
	const capacity = slots * evictSize
	e, _ := openNew(t, open, capacity)
	const total = 4 * slots
	for i := range total {
		mustCache(t, e, Key(800+i), Value(uint64(800+i), evictSize))
		if st := e.Stats(); st.UsedBytes > capacity {
			t.Fatalf("after %d puts: UsedBytes %d > capacity %d", i+1, st.UsedBytes, capacity)
		}
	}
	// The newest value is always there: eviction made room for it.
	MustEqual(t, e, Key(800+total-1), Value(uint64(800+total-1), evictSize))

	var present uint64
	for i := range total {
		k := Key(800 + i)
		n, err := e.Exist(k)
		if wire.StatusOf(err) == wire.StatusNotFound {
			continue
		}
		if err != nil || n != evictSize {
			t.Fatalf("Exist(%d) = %d, %v", i, n, err)
		}
		MustEqual(t, e, k, Value(uint64(800+i), evictSize))
		present++
	}
	st := e.Stats()
	if st.Objects != present || st.UsedBytes != present*evictSize {
		t.Fatalf("Stats Objects %d UsedBytes %d, but %d values present", st.Objects, st.UsedBytes, present)
	}
	if st.Evictions != total-present {
		t.Fatalf("Evictions %d, want %d (puts %d, present %d)", st.Evictions, total-present, total, present)
	}
	if present < slots/2 {
		t.Fatalf("only %d of %d slots hold a value after filling", present, slots)
	}
}

// testClock is the deterministic, single-threaded CLOCK check: fill the
// engine exactly, read the first half, then store a quarter more. Eviction
// must take the never-read values and leave every read one (the second
// chance).
func testClock(t *testing.T, open Opener) {
	const slots = 64
	const capacity = slots * evictSize
	e, _ := openNew(t, open, capacity)
	for i := range slots {
		mustCache(t, e, Key(900+i), Value(uint64(900+i), evictSize))
	}
	if st := e.Stats(); st.Evictions != 0 {
		t.Fatalf("%d evictions while filling to exactly the capacity", st.Evictions)
	}
	for i := range slots / 2 {
		Get(t, e, Key(900+i))
	}
	for i := range slots / 4 {
		mustCache(t, e, Key(900+slots+i), Value(uint64(900+slots+i), evictSize))
	}
	survived := func(from, to int) (n int) {
		for i := from; i < to; i++ {
			if _, err := e.Exist(Key(900 + i)); err == nil {
				n++
			}
		}
		return n
	}
	read, unread := survived(0, slots/2), survived(slots/2, slots)
	t.Logf("survivors: %d of %d read values, %d of %d never-read values", read, slots/2, unread, slots/2)
	if read <= unread {
		t.Fatalf("read values survived no better than never-read ones: %d vs %d", read, unread)
	}
	if read != slots/2 {
		t.Fatalf("%d of %d read values were evicted while never-read values remained", slots/2-read, slots/2)
	}
	if st := e.Stats(); st.Evictions != slots/4 {
		t.Fatalf("Evictions %d, want %d", st.Evictions, slots/4)
	}
}
