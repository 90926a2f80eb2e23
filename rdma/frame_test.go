package rdma

// Not hardware tests: the bootstrap frames' encoding.

import (
	"errors"
	"testing"

	"github.com/dfkv/dfkv/wire"
)

func TestBootstrapRoundTrip(t *testing.T) {
	b := bootstrap{Device: "mlx5_0", Endpoint: Endpoint{QPN: 0xabcdef, PSN: 0x123456, LID: 0x4321}}
	copy(b.GID[:], "0123456789abcdef")
	f := appendBootstrap(nil, b)
	if len(f) != bootstrapLen || f[0] != wire.EpochLease {
		t.Fatalf("frame of %d bytes, epoch %d", len(f), f[0])
	}
	got, err := decodeBootstrap(f)
	b.Epoch = wire.EpochLease
	if err != nil || got != b {
		t.Fatalf("round trip: %+v %v, want %+v", got, err, b)
	}
	bad := func(name string, mutate func(f []byte), want wire.Status) {
		t.Helper()
		g := append([]byte(nil), f...)
		mutate(g)
		if _, err := decodeBootstrap(g); !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", name, err, want)
		}
	}
	bad("epoch 8", func(f []byte) { f[0] = 8 }, wire.StatusEpochMismatch)
	bad("a TCP request", func(f []byte) { f[0] = wire.EpochTCP }, wire.StatusEpochMismatch)
	bad("no QPN", func(f []byte) { f[3], f[4], f[5] = 0, 0, 0 }, wire.StatusInvalid)
	bad("bytes after the name", func(f []byte) { f[27] = 0 }, wire.StatusInvalid)
	if _, err := decodeBootstrap(f[:31]); !errors.Is(err, wire.StatusInvalid) {
		t.Errorf("truncated: %v", err)
	}
	r := regions{Arena: 1 << 40, Words: 2 << 40, Staging: 3 << 40, ArenaKey: 1, WordsKey: 2, StagingKey: 3}
	if got, err := decodeRegions(appendRegions(nil, r)); err != nil || got != r {
		t.Fatalf("regions round trip: %+v %v", got, err)
	}
}
