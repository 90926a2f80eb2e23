package server

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/engine/lease"
	"github.com/dfkv/dfkv/wire"
)

// pinSet keeps the values a BATCH_EXIST with the pin flag found from
// being evicted until a GET of the key reads them, or for
// server.lease_ms: an engine that looks a prefix up and then loads it
// (LMCache's contains with pin, SGLang's exists before its prefetch) must
// not lose the prefix to eviction in between. Pins are the node's, not a
// connection's: the GET that follows may come on any connection of any
// client, and it ends one pin of its key. A value is pinned where it is
// (engine.Pinner): in RAM if it is resident there, else on its disk.
type pinSet struct {
	pinner engine.Pinner
	table  *lease.Table
	live   atomic.Int64 // ids in m, so a GET with no pins anywhere skips the lock

	mu sync.Mutex
	m  map[wire.BlockKey][]wire.LeaseID
}

// pinOwner is the owner of every pin in the table: pins belong to the node.
const pinOwner = 0

func newPinSet(pn engine.Pinner, ttl time.Duration, max int) (*pinSet, error) {
	t, err := lease.New(lease.Options{Lender: unpinner{pn}, Capacity: max, TTL: ttl})
	if err != nil {
		return nil, err
	}
	return &pinSet{pinner: pn, table: t, m: map[wire.BlockKey][]wire.LeaseID{}}, nil
}

// unpinner ends the lease table's loans as pins.
type unpinner struct{ engine.Pinner }

func (u unpinner) Lend(wire.BlockKey, uint64, uint64) ([]byte, uint64, engine.Loan, bool, error) {
	return nil, 0, engine.Loan{}, false, nil // the table only returns loans
}
func (u unpinner) Return(l engine.Loan) { u.Unpin(l) }

// pin pins key's value; false when there is none to pin (or every lease
// is live).
func (p *pinSet) pin(key wire.BlockKey) bool {
	loan, ok := p.pinner.Pin(key)
	if !ok {
		return false
	}
	id, _, granted := p.table.Grant(pinOwner, loan, 0)
	if !granted {
		p.pinner.Unpin(loan)
		return false
	}
	p.mu.Lock()
	ids := p.m[key]
	// Pins of a key are listed oldest first and all last the same time,
	// so the ones that expired meanwhile are at the front: they go now,
	// each once, and a key pinned again and again is neither a growing
	// list nor a walk of it per pin (sweep takes any others).
	gone := 0
	for gone < len(ids) && !p.table.Held(ids[gone]) {
		gone++
	}
	p.live.Add(int64(1 - gone))
	p.m[key] = append(ids[gone:], id)
	p.mu.Unlock()
	return true
}

// read ends one pin of key: a GET read it.
func (p *pinSet) read(key wire.BlockKey) {
	if p == nil || p.live.Load() == 0 {
		return
	}
	p.mu.Lock()
	ids := p.m[key]
	if len(ids) == 0 {
		p.mu.Unlock()
		return
	}
	id := ids[len(ids)-1]
	if len(ids) == 1 {
		delete(p.m, key)
	} else {
		p.m[key] = ids[:len(ids)-1]
	}
	p.live.Add(-1)
	p.mu.Unlock()
	_ = p.table.Release(pinOwner, id) // one that expired already ended nothing
}

// sweep forgets the ids of expired pins (the table unpinned them), so
// keys pinned and never read do not stay in the map.
func (p *pinSet) sweep() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, ids := range p.m {
		j := 0
		for _, id := range ids {
			if p.table.Held(id) {
				ids[j] = id
				j++
			}
		}
		p.live.Add(int64(j - len(ids)))
		if j == 0 {
			delete(p.m, k)
		} else {
			p.m[k] = ids[:j]
		}
	}
}

// run sweeps once per lease time until stop.
func (p *pinSet) run(stop <-chan struct{}) {
	t := time.NewTicker(p.table.TTL())
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			p.sweep()
		}
	}
}

// close ends every pin, returning its loan.
func (p *pinSet) close() { p.table.Close() }
