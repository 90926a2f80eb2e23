package wire

import "testing"

func TestHasDuplicate(t *testing.T) {
	k := func(i int) BlockKey {
		var b BlockKey
		b.Tenant = uint64(i % 3)
		b.ID[0], b.ID[1] = byte(i), byte(i>>8)
		return b
	}
	for _, n := range []int{0, 1, 2, 16, 17, 100} { // both the pairwise and the map paths
		keys := make([]BlockKey, n)
		for i := range keys {
			keys[i] = k(i)
		}
		if HasDuplicate(keys) {
			t.Fatalf("%d distinct keys reported as repeating", n)
		}
		if n >= 2 {
			keys[n-1] = keys[0]
			if !HasDuplicate(keys) {
				t.Fatalf("%d keys with the first repeated last: not found", n)
			}
		}
	}
}
