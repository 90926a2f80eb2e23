package ramtier

import (
	"testing"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/engine/enginetest"
	"github.com/dfkv/dfkv/wire"
)

// conformanceOptions: the arena is a quarter of the suite's 64-slot
// eviction disks, so its CLOCK and eviction checks still see the backing's
// eviction, and values past 64 KiB use the dedicated large-value budget.
func conformanceOptions(backing engine.StoreEngine, ack string) Options {
	return Options{
		Backing:           backing,
		Bytes:             64<<10 + 4<<20,
		ExtentBytes:       64 << 10,
		LargeReserveBytes: 4 << 20,
		AckMode:           ack,
		FlushThreads:      2,
		ReadCoalesce:      true,
	}
}

// TestConformanceOverSlabDiskAck runs the engine conformance suite over a
// RAM tier fronting a slab engine in t.TempDir() (in-process), with disk
// acknowledgement: every PUT has reached the slab when Put returns, so
// the suite's exact eviction and Stats checks apply unchanged.
func TestConformanceOverSlabDiskAck(t *testing.T) {
	enginetest.Run(t, func(t *testing.T, dir string, capacity uint64) engine.StoreEngine {
		tr := openTier(t, conformanceOptions(openSlab(t, dir, capacity), AckDisk))
		t.Cleanup(func() { checkTier(t, tr) })
		return tr
	})
}

// TestConformanceOverSlabRAMAck runs the suite with RAM acknowledgement
// (the write-back default) over an in-process slab engine. NB: the suite's
// eviction checks assume every acknowledged PUT already reached the disk
// (Stats after each PUT, CLOCK survivors by Exist); with RAM ack that is
// only true once the flushes drained, so the engine under test drains
// (Flush) before each Stats and Exist. Every other call goes straight to
// the tier.
func TestConformanceOverSlabRAMAck(t *testing.T) {
	enginetest.Run(t, func(t *testing.T, dir string, capacity uint64) engine.StoreEngine {
		tr := openTier(t, conformanceOptions(openSlab(t, dir, capacity), AckRAM))
		t.Cleanup(func() { checkTier(t, tr) })
		return drained{tr}
	})
}

type drained struct{ *Tier }

func (d drained) Stats() engine.Stats {
	_ = d.Flush()
	return d.Tier.Stats()
}

func (d drained) Exist(key wire.BlockKey) (uint64, error) {
	_ = d.Flush()
	return d.Tier.Exist(key)
}
