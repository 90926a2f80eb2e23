package objtier

import (
	"bytes"
	"testing"

	"github.com/dfkv/dfkv/engine/enginetest"
)

// FuzzCheckObject: whatever a bucket hands back, checking it never panics,
// and an object it accepts is exactly a value written under the key.
func FuzzCheckObject(f *testing.F) {
	k := enginetest.Key(1)
	good := make([]byte, HeaderLen+100)
	copy(good[HeaderLen:], enginetest.Value(1, 100))
	putHeader(good, k, good[HeaderLen:])
	f.Add(good)
	f.Add(good[:HeaderLen])
	f.Add([]byte("DFKVOBJ1"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, obj []byte) {
		value, err := checkObject(obj, k)
		if err != nil {
			return
		}
		again := make([]byte, HeaderLen+len(value))
		copy(again[HeaderLen:], value)
		putHeader(again, k, again[HeaderLen:])
		if !bytes.Equal(again, obj) {
			t.Fatalf("accepted an object that is not the header of its value: %x", obj)
		}
	})
}
