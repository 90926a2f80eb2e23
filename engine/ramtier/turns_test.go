package ramtier

import (
	"slices"
	"sync"
	"testing"

	"github.com/dfkv/dfkv/wire"
)

// TestKeyTurnsAreFIFO: PUTs of one key waiting for its turn get it in the
// order they asked, whatever order the scheduler wakes them in; a PUT of
// another key on the same stripe does not wait; the stripe keeps no entry
// once nobody holds or waits for a key.
func TestKeyTurnsAreFIFO(t *testing.T) {
	var k keyTurns
	key := wire.BlockKey{Tenant: 1, ID: [16]byte{1}}
	other := wire.BlockKey{Tenant: 1, ID: [16]byte{2}}
	k.take(key)

	const waiters = 8
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := range waiters {
		wg.Go(func() {
			k.take(key)
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			k.give(key)
		})
		// The next one asks only once this one holds its ticket.
		for issued := uint64(0); issued != uint64(i+2); {
			k.mu.Lock()
			issued = k.turns[k.find(key)].next
			k.mu.Unlock()
		}
	}
	k.take(other) // not held up by key's queue
	k.give(other)
	k.give(key)
	wg.Wait()
	if want := []int{0, 1, 2, 3, 4, 5, 6, 7}; !slices.Equal(order, want) {
		t.Fatalf("turns went in the order %v, want %v", order, want)
	}
	if len(k.turns) != 0 {
		t.Fatalf("%d entries left on an idle stripe", len(k.turns))
	}
}
