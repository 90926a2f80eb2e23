package engine

import (
	"fmt"
	"sync/atomic"

	"github.com/dfkv/dfkv/wire"
)

// Discard is the disk of a node that has none (an embedded store kept
// in RAM alone): it accepts every write and keeps nothing, so the RAM
// tier in front of it treats each flushed value as safe to evict, and a
// value once evicted is a miss, as a cache allows.
type Discard struct {
	closed atomic.Bool
	puts   atomic.Uint64
	misses atomic.Uint64
}

func (d *Discard) check() error {
	if d.closed.Load() {
		return fmt.Errorf("no disk (closed): %w", wire.StatusUnavailable)
	}
	return nil
}

// Put accepts value and forgets it.
func (d *Discard) Put(key wire.BlockKey, value []byte) error {
	if err := d.check(); err != nil {
		return err
	}
	if len(value) == 0 {
		return fmt.Errorf("zero-byte value: %w", wire.StatusInvalid)
	}
	d.puts.Add(1)
	return nil
}

// PutBatch accepts every item.
func (d *Discard) PutBatch(keys []wire.BlockKey, values [][]byte, errs []error) {
	for i := range keys {
		errs[i] = d.Put(keys[i], values[i])
	}
}

// Get misses.
func (d *Discard) Get(wire.BlockKey, uint64, uint64, Allocator) ([]byte, uint64, error) {
	if err := d.check(); err != nil {
		return nil, 0, err
	}
	d.misses.Add(1)
	return nil, 0, wire.StatusNotFound
}

// Exist misses.
func (d *Discard) Exist(wire.BlockKey) (uint64, error) {
	if err := d.check(); err != nil {
		return 0, err
	}
	return 0, wire.StatusNotFound
}

// Remove finds nothing.
func (d *Discard) Remove(wire.BlockKey) error {
	if err := d.check(); err != nil {
		return err
	}
	return wire.StatusNotFound
}

// Stats reports a disk of no capacity that is healthy.
func (d *Discard) Stats() Stats {
	return Stats{Engine: "none", Path: "(no disk)", Puts: d.puts.Load(), Misses: d.misses.Load(), Healthy: !d.closed.Load()}
}

// Close makes every later call UNAVAILABLE.
func (d *Discard) Close() error {
	d.closed.Store(true)
	return nil
}

var _ StoreEngine = (*Discard)(nil)
