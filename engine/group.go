package engine

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"

	"github.com/dfkv/dfkv/wire"
)

// Group is a node's disk cache group: one StoreEngine per disk
// directory of a node, with every block routed to exactly one of them by a
// Ketama ring over the disk names (wire.NewRing, one member per disk, its ID
// the cleaned directory path) at wire.DiskHash(key), an FNV-1a of the
// block's filename. Placement depends only on the set of directory names,
// not their order in the configuration, so reordering the disks moves
// nothing; adding a disk moves about 1/N of the blocks to it (the rest
// become misses, cold on their old disk until CLOCK evicts them).
//
// Group is itself a StoreEngine, so the server holds one engine whatever the
// number of disks.
type Group struct {
	engines []StoreEngine
	names   []string
	ring    *wire.Ring
	quotas  *Quotas // nil = no quotas
}

var _ StoreEngine = (*Group)(nil)

// groupPointsPerWeight is the ring density per disk: ketama's 160 points
// keep a handful of disks within a few percent of an even share.
const groupPointsPerWeight = wire.DefaultPointsPerWeight

// NewGroup routes over engines; names[i] is the directory of engines[i] and
// its identity on the ring. It rejects an empty list, mismatched lengths, a
// nil engine and two engines with one name. The Group takes ownership:
// Close closes every engine.
func NewGroup(engines []StoreEngine, names []string) (*Group, error) {
	if len(engines) == 0 {
		return nil, fmt.Errorf("disk group: no disks configured: %w", wire.StatusInvalid)
	}
	if len(engines) != len(names) {
		return nil, fmt.Errorf("disk group: %d engines but %d disk names: %w", len(engines), len(names), wire.StatusInvalid)
	}
	members := make([]wire.Member, len(names))
	clean := make([]string, len(names))
	for i, n := range names {
		if engines[i] == nil {
			return nil, fmt.Errorf("disk group: disk %q has no engine: %w", n, wire.StatusInvalid)
		}
		if n == "" {
			return nil, fmt.Errorf("disk group: disk %d has an empty name: %w", i, wire.StatusInvalid)
		}
		// "/data/d0/" and "/data/d0" are one disk and must route alike.
		clean[i] = filepath.Clean(n)
		members[i] = wire.Member{ID: clean[i], Addr: n, Weight: 1}
	}
	ring, err := wire.NewRing(members, groupPointsPerWeight)
	if err != nil {
		return nil, fmt.Errorf("disk group: %w; give every disk its own directory", err)
	}
	return &Group{engines: append([]StoreEngine(nil), engines...), names: clean, ring: ring}, nil
}

// DiskOf returns the index (into the engines given to NewGroup) of the disk
// that owns key.
func (g *Group) DiskOf(key wire.BlockKey) int {
	if len(g.engines) == 1 {
		return 0 // the usual single-disk node: no hash per request
	}
	return g.ring.Get(wire.DiskHash(key))
}

// Names returns the disk names, cleaned, in the order given to NewGroup.
func (g *Group) Names() []string { return append([]string(nil), g.names...) }

// Engine returns the engine of disk i.
func (g *Group) Engine(i int) StoreEngine { return g.engines[i] }

func (g *Group) of(key wire.BlockKey) StoreEngine { return g.engines[g.DiskOf(key)] }

// Put implements StoreEngine, admitting the PUT against its tenant's
// quota when quotas are set.
func (g *Group) Put(key wire.BlockKey, value []byte) error {
	if g.quotas != nil {
		return g.cacheWithQuota(key, value)
	}
	return g.of(key).Put(key, value)
}

// PutBatch implements StoreEngine: the items are split by disk, the disks
// run concurrently (one goroutine per disk with items), and each disk sees
// its items in batch order, so a key repeated in a batch ends with its last
// value. With quotas set, items over their tenant's quota fail with
// QUOTA_EXCEEDED and the others are stored.
func (g *Group) PutBatch(keys []wire.BlockKey, values [][]byte, errs []error) {
	if g.quotas != nil {
		g.cacheBatchWithQuota(keys, values, errs)
		return
	}
	g.cacheBatch(keys, values, errs)
}

func (g *Group) cacheBatch(keys []wire.BlockKey, values [][]byte, errs []error) {
	if len(g.engines) == 1 {
		g.engines[0].PutBatch(keys, values, errs)
		return
	}
	disk := make([]int, len(keys))
	count := make([]int, len(g.engines))
	busy := 0
	for i, k := range keys {
		d := g.DiskOf(k)
		disk[i] = d
		if count[d] == 0 {
			busy++
		}
		count[d]++
	}
	if busy <= 1 {
		if len(keys) > 0 {
			g.engines[disk[0]].PutBatch(keys, values, errs)
		}
		return
	}
	var wg sync.WaitGroup
	for d, n := range count {
		if n == 0 {
			continue
		}
		wg.Go(func() {
			pos := make([]int, 0, n)
			dk := make([]wire.BlockKey, 0, n)
			dv := make([][]byte, 0, n)
			for i := range keys {
				if disk[i] == d {
					pos = append(pos, i)
					dk = append(dk, keys[i])
					dv = append(dv, values[i])
				}
			}
			de := make([]error, n)
			g.engines[d].PutBatch(dk, dv, de)
			for j, i := range pos {
				errs[i] = de[j]
			}
		})
	}
	wg.Wait()
}

// Get implements StoreEngine.
func (g *Group) Get(key wire.BlockKey, offset, length uint64, alloc Allocator) ([]byte, uint64, error) {
	return g.of(key).Get(key, offset, length, alloc)
}

// Exist implements StoreEngine.
func (g *Group) Exist(key wire.BlockKey) (uint64, error) { return g.of(key).Exist(key) }

// Remove implements StoreEngine.
func (g *Group) Remove(key wire.BlockKey) error {
	if g.quotas != nil {
		return g.removeWithQuota(key)
	}
	return g.of(key).Remove(key)
}

// Stats implements StoreEngine: the sum over the disks. Engine is the disks'
// engine name ("mixed" if they differ) and Path lists the disks.
func (g *Group) Stats() Stats {
	sum := Stats{Path: strings.Join(g.names, ","), DirectIO: true, Healthy: true}
	for i, e := range g.engines {
		st := e.Stats()
		switch {
		case i == 0:
			sum.Engine = st.Engine
		case sum.Engine != st.Engine:
			sum.Engine = "mixed"
		}
		sum.Add(st)
	}
	return sum
}

// Disks returns each disk's Stats, in the order given to NewGroup.
func (g *Group) Disks() []Stats {
	out := make([]Stats, len(g.engines))
	for i, e := range g.engines {
		out[i] = e.Stats()
	}
	return out
}

// Close closes every disk, concurrently since each syncs its own device,
// and returns their errors joined.
func (g *Group) Close() error {
	errs := make([]error, len(g.engines))
	var wg sync.WaitGroup
	for i, e := range g.engines {
		wg.Go(func() { errs[i] = e.Close() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

var _ Pinner = (*Group)(nil)

// Pin implements Pinner through the key's disk, when its engine pins.
func (g *Group) Pin(key wire.BlockKey) (Loan, bool) {
	d := g.DiskOf(key)
	p, ok := g.engines[d].(Pinner)
	if !ok {
		return Loan{}, false
	}
	l, ok := p.Pin(key)
	if !ok {
		return Loan{}, false
	}
	if l.B != 0 {
		panic("engine: a disk engine's pin uses Loan.B, which the group needs for the disk index")
	}
	return Loan{A: l.A, B: uint64(d)}, true
}

// Unpin implements Pinner.
func (g *Group) Unpin(l Loan) { g.engines[l.B].(Pinner).Unpin(Loan{A: l.A}) }
