package enginetest

import (
	"testing"

	"github.com/dfkv/dfkv/wire"
)

func testBatch(t *testing.T, open Opener) {
	const capacity = 64 << 20
	e, _ := openNew(t, open, capacity)
	keys := []wire.BlockKey{Key(300), Key(301), Key(302), Key(303), Key(300), Key(304)}
	values := [][]byte{
		Value(300, 4096),
		nil, // zero bytes: INVALID, the rest still stored
		Value(302, 65537),
		make([]byte, capacity+1), // TOO_LARGE
		Value(3000, 17),          // same key as item 0: items apply in order
		Value(304, 1),
	}
	want := []wire.Status{wire.StatusOK, wire.StatusInvalid, wire.StatusOK, wire.StatusTooLarge, wire.StatusOK, wire.StatusOK}
	errs := make([]error, len(keys))
	e.PutBatch(keys, values, errs)
	for i, err := range errs {
		WantStatus(t, err, want[i], "PutBatch item "+string(rune('0'+i)))
	}
	MustEqual(t, e, Key(300), values[4])
	MustEqual(t, e, Key(302), values[2])
	MustEqual(t, e, Key(304), values[5])
	for _, k := range []wire.BlockKey{Key(301), Key(303)} {
		_, err := e.Exist(k)
		WantStatus(t, err, wire.StatusNotFound, "Exist of a rejected batch item")
	}

	// An empty batch is a no-op.
	e.PutBatch(nil, nil, nil)
}
