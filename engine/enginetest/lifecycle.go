package enginetest

import (
	"testing"

	"github.com/dfkv/dfkv/wire"
)

// testReopen: nothing acknowledged as stored is lost across a graceful
// restart, byte for byte, and nothing removed comes back.
func testReopen(t *testing.T, open Opener) {
	e, dir := openNew(t, open, bigCapacity)
	want := map[wire.BlockKey][]byte{}
	for i, n := range Sizes {
		k := Key(500 + i)
		v := Value(uint64(5000+i), n)
		mustCache(t, e, k, v)
		want[k] = v
	}
	// An overwritten key keeps its last value; a removed key stays removed.
	over := Key(500)
	want[over] = Value(5999, 12345)
	mustCache(t, e, over, want[over])
	gone := Key(501)
	if err := e.Remove(gone); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	delete(want, gone)
	before := e.Stats()
	if err := e.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	for round := range 2 {
		e = openAt(t, open, dir, bigCapacity)
		for k, v := range want {
			MustEqual(t, e, k, v)
		}
		_, err := e.Exist(gone)
		WantStatus(t, err, wire.StatusNotFound, "Exist of a key removed before the restart")
		st := e.Stats()
		if st.Objects != before.Objects || st.UsedBytes != before.UsedBytes {
			t.Fatalf("reopen %d: Objects %d UsedBytes %d, want %d and %d", round, st.Objects, st.UsedBytes, before.Objects, before.UsedBytes)
		}
		if err := e.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
}

// testClosed: after Close every method fails with UNAVAILABLE.
func testClosed(t *testing.T, open Opener) {
	e, _ := openNew(t, open, bigCapacity)
	k := Key(600)
	mustCache(t, e, k, Value(600, 100))
	if err := e.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	WantStatus(t, e.Put(k, Value(601, 100)), wire.StatusUnavailable, "Put after Close")
	errs := make([]error, 1)
	e.PutBatch([]wire.BlockKey{k}, [][]byte{Value(602, 10)}, errs)
	WantStatus(t, errs[0], wire.StatusUnavailable, "PutBatch after Close")
	_, _, err := e.Get(k, 0, 0, NewAlloc(nil))
	WantStatus(t, err, wire.StatusUnavailable, "Get after Close")
	_, err = e.Exist(k)
	WantStatus(t, err, wire.StatusUnavailable, "Exist after Close")
	WantStatus(t, e.Remove(k), wire.StatusUnavailable, "Remove after Close")
	WantStatus(t, e.Close(), wire.StatusUnavailable, "second Close")
	_ = e.Stats() // still answers, for the last metrics scrape
}

// testStats: the counters move with the operations.
func testStats(t *testing.T, open Opener) {
	const capacity = 8 << 20
	e, dir := openNew(t, open, capacity)
	st := e.Stats()
	if st.Engine == "" || st.CapacityBytes != capacity || !st.Healthy || st.Objects != 0 || st.UsedBytes != 0 {
		t.Fatalf("fresh engine on %s: %+v", dir, st)
	}
	k1, k2 := Key(700), Key(701)
	mustCache(t, e, k1, Value(700, 1000))
	mustCache(t, e, k2, Value(701, 5000))
	Get(t, e, k1)
	Get(t, e, k1)
	_, _, err := e.Get(Key(702), 0, 0, NewAlloc(nil))
	WantStatus(t, err, wire.StatusNotFound, "Get of a missing key")
	if err := e.Remove(k2); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	st = e.Stats()
	if st.Puts != 2 || st.Hits != 2 || st.Misses != 1 || st.Removes != 1 {
		t.Fatalf("Puts %d Hits %d Misses %d Removes %d, want 2 2 1 1", st.Puts, st.Hits, st.Misses, st.Removes)
	}
	if st.Objects != 1 || st.UsedBytes != 1000 || st.Evictions != 0 || st.IOErrors != 0 {
		t.Fatalf("Objects %d UsedBytes %d Evictions %d IOErrors %d, want 1 1000 0 0", st.Objects, st.UsedBytes, st.Evictions, st.IOErrors)
	}
}
