package client_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/dfkv/dfkv/roles/server"
	"github.com/dfkv/dfkv/wire"
	"github.com/dfkv/dfkv/wire/client"
)

// TestExistPrefixOfChainKeys: against a real node, ExistPrefix of a
// chain's object keys counts the leading blocks stored, for every k, and
// a second prompt sharing the first blocks finds them.
func TestExistPrefixOfChainKeys(t *testing.T) {
	addr := runNode(t, server.Deps{}, nil)
	cl, err := client.Open(client.Options{Namespace: []byte("chain-prefix"), Members: []string{addr}, SharedMemory: client.ShmOff})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	const bt, blocks = 16, 5
	toks := make([]uint32, bt*blocks+7)
	for i := range toks {
		toks[i] = uint32(1000 + i)
	}
	fp := wire.LayoutFingerprint(wire.LayoutField{Name: "k_shape", Values: []int64{2, 16, 8, 64}})
	c, err := wire.ChainKeys(fp, toks, bt)
	if err != nil {
		t.Fatal(err)
	}
	keys := c.ObjectKeys()
	if len(keys) != blocks+1 {
		t.Fatalf("%d keys, want %d blocks and a tail", len(keys), blocks)
	}
	blockKeys := keys[:blocks]
	for k := 0; k <= blocks; k++ {
		if k > 0 {
			if err := cl.Put(ctx, blockKeys[k-1], fmt.Appendf(nil, "kv of block %d", k-1)); err != nil {
				t.Fatal(err)
			}
		}
		if n, err := cl.ExistPrefix(ctx, blockKeys); n != k || err != nil {
			t.Fatalf("blocks 0..%d stored: ExistPrefix = %d, %v; want %d", k-1, n, err, k)
		}
	}
	// The tail is not stored: the whole chain's prefix stops before it.
	if n, err := cl.ExistPrefix(ctx, keys); n != blocks || err != nil {
		t.Fatalf("ExistPrefix with the tail key = %d, %v; want %d", n, err, blocks)
	}
	// A prompt sharing the first two blocks, then diverging.
	other := append(append([]uint32{}, toks[:2*bt]...), 7, 7, 7)
	other = append(other, toks[2*bt+3:]...)
	oc, err := wire.ChainKeys(fp, other, bt)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := cl.ExistPrefix(ctx, oc.ObjectKeys()); n != 2 || err != nil {
		t.Fatalf("diverging prompt: ExistPrefix = %d, %v; want 2", n, err)
	}
	// A gap cuts the count: block 1 removed, blocks 2.. still stored.
	if err := cl.Remove(ctx, blockKeys[1]); err != nil {
		t.Fatal(err)
	}
	if n, err := cl.ExistPrefix(ctx, blockKeys); n != 1 || err != nil {
		t.Fatalf("block 1 removed: ExistPrefix = %d, %v; want 1", n, err)
	}
}
