package ramtier

import (
	"sync"

	"github.com/dfkv/dfkv/wire"
)

// keyTurns makes foreground PUTs of one key take turns: admission, and a
// synchronous disk write when there is one, of one PUT finish before the
// next PUT of that key starts. It is one of 1,024 fixed stripes (by key
// hash), so a request allocates nothing, but unlike a stripe mutex it
// holds no lock while a PUT writes to disk: PUTs of other keys on the
// stripe go ahead, and only a PUT of the same key waits. The PUTs of one
// key get their turns in the order they asked (a ticket each), so a key
// under heavy contention cannot pass over one writer again and again.
type keyTurns struct {
	mu    sync.Mutex
	free  sync.Cond // broadcast when a key's turn ends
	turns []turn    // keys whose turn someone holds; rarely more than one
}

// turn is one busy key's queue: tickets below next are issued, and the
// holder of serving has the turn.
type turn struct {
	key           wire.BlockKey
	serving, next uint64
}

func (k *keyTurns) find(key wire.BlockKey) int {
	for i := range k.turns {
		if k.turns[i].key == key {
			return i
		}
	}
	return -1
}

// take waits until every PUT of key that asked before it has had its
// turn, then holds the turn.
func (k *keyTurns) take(key wire.BlockKey) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.free.L == nil {
		k.free.L = &k.mu
	}
	i := k.find(key)
	if i < 0 {
		k.turns = append(k.turns, turn{key: key, next: 1})
		return
	}
	ticket := k.turns[i].next
	k.turns[i].next++
	for k.turns[k.find(key)].serving != ticket {
		k.free.Wait()
	}
}

// give ends key's turn, taken by take, and hands it to the next ticket.
func (k *keyTurns) give(key wire.BlockKey) {
	k.mu.Lock()
	defer k.mu.Unlock()
	i := k.find(key)
	if i < 0 {
		return
	}
	t := &k.turns[i]
	if t.serving++; t.serving == t.next {
		last := len(k.turns) - 1
		k.turns[i] = k.turns[last]
		k.turns = k.turns[:last]
		return // nobody waits for this key
	}
	k.free.Broadcast()
}
