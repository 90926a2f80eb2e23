package ramtier

import (
	"slices"
	"sync"

	"github.com/dfkv/dfkv/wire"
)

// keyTurns makes foreground PUTs of one key take turns: admission, and a
// synchronous disk write when there is one, of one PUT finish before the
// next PUT of that key starts. It is one of 1,024 fixed stripes (by key
// hash), so a request allocates nothing, but unlike a stripe mutex it
// holds no lock while a PUT writes to disk: PUTs of other keys on the
// stripe go ahead, and only a PUT of the same key waits.
type keyTurns struct {
	mu   sync.Mutex
	free sync.Cond       // broadcast when a key's turn ends
	busy []wire.BlockKey // keys whose turn it is; rarely more than one
}

// take waits until no other PUT of key holds its turn, then holds it.
func (k *keyTurns) take(key wire.BlockKey) {
	k.mu.Lock()
	if k.free.L == nil {
		k.free.L = &k.mu
	}
	for slices.Contains(k.busy, key) {
		k.free.Wait()
	}
	k.busy = append(k.busy, key)
	k.mu.Unlock()
}

// give ends key's turn, taken by take.
func (k *keyTurns) give(key wire.BlockKey) {
	k.mu.Lock()
	if i := slices.Index(k.busy, key); i >= 0 {
		last := len(k.busy) - 1
		k.busy[i] = k.busy[last]
		k.busy = k.busy[:last]
	}
	if k.free.L != nil {
		k.free.Broadcast()
	}
	k.mu.Unlock()
}
