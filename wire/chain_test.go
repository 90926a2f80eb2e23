package wire

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"testing"

	"lukechampine.com/blake3"
)

func h32(t *testing.T, s string) [ChainHashSize]byte {
	t.Helper()
	var h [ChainHashSize]byte
	if b, err := hex.DecodeString(s); err != nil || len(b) != ChainHashSize {
		t.Fatalf("bad 32-byte hex %q: %v", s, err)
	} else {
		copy(h[:], b)
	}
	return h
}

// TestChainIndependentVectors pins the construction to values that do not
// come from this package: BLAKE3's published digest of the empty input,
// hashes of hand-concatenated bytes, and digests computed with b3sum, the
// BLAKE3 team's reference implementation, over the same bytes.
func TestChainIndependentVectors(t *testing.T) {
	if got := blake3.Sum256(nil); got != h32(t, "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262") {
		t.Fatalf("BLAKE3(\"\") = %x, not the published test vector", got)
	}
	// seed = H("DFKVCHAIN1" || u64le(0x0123456789abcdef)), spelled out.
	in := append([]byte("DFKVCHAIN1"), 0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01)
	seed := blake3.Sum256(in)
	if got := ChainSeed(0x0123456789abcdef); got != seed {
		t.Fatalf("ChainSeed = %x, want H(%q) = %x", got, in, seed)
	}
	// The same values from b3sum over the same bytes:
	//   seed   = b3sum("DFKVCHAIN1" || ef cd ab 89 67 45 23 01)
	//   c0     = b3sum(seed || 01000000 02000000)
	//   c1     = b3sum(c0 || 03000000 04000000)
	//   name   = b3sum(c1 || "tail")
	//   digest = b3sum(c1 || 05000000)
	want := struct{ seed, c0, c1, name, digest string }{
		"e6c05c65d4f041fb2085cdb3e5521e7bafaa6e98f850627927c28dd23283c2dd",
		"4c401db66ba43808ab8c39000bb6ed44bdc192f7afe43851eb114547b8fa37c2",
		"7b54aae8fb35cd93c2a117df40dda67eac8c763e7cb5a6c90e3ac96cdb928b7b",
		"a470ef02343c42a21f1bf9bd6d5d0a40e47b2f3eaba6264d1342dfe4cd8acf89",
		"3cdee5030b2c1d0c66ef6fd378f709657896023b29fdfd84ca6a1682265668fc",
	}
	if seed != h32(t, want.seed) {
		t.Fatalf("seed %x, b3sum says %s", seed, want.seed)
	}
	c0 := blake3.Sum256(append(seed[:], 1, 0, 0, 0, 2, 0, 0, 0))
	if c0 != h32(t, want.c0) {
		t.Fatalf("hand-made chain[0] %x, b3sum says %s", c0, want.c0)
	}
	c, err := ChainKeys(0x0123456789abcdef, []uint32{1, 2, 3, 4, 5}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Blocks) != 2 || c.Blocks[0] != h32(t, want.c0) || c.Blocks[1] != h32(t, want.c1) {
		t.Fatalf("blocks %x, want [%s %s]", c.Blocks, want.c0, want.c1)
	}
	if c.Tail == nil || c.Tail.Name != h32(t, want.name) || c.Tail.Digest != h32(t, want.digest) || c.Tail.Tokens != 1 {
		t.Fatalf("tail %+v, want name %s digest %s tokens 1", c.Tail, want.name, want.digest)
	}
	keys := c.ObjectKeys()
	if len(keys) != 3 || string(keys[0]) != "dfkv/chain/v1/b3="+want.c0 || string(keys[1]) != "dfkv/chain/v1/b3="+want.c1 ||
		string(keys[2]) != "dfkv/chain/v1/tail/b3="+want.name {
		t.Fatalf("object keys %q", keys)
	}

	// Fingerprint 0, no full block: the tail's parent is seed itself.
	//   b3sum("DFKVCHAIN1" || 00 x 8), b3sum(seed || "tail"), b3sum(seed || ffffffff)
	c, err = ChainKeys(0, []uint32{0xffffffff}, 128)
	if err != nil {
		t.Fatal(err)
	}
	if ChainSeed(0) != h32(t, "5ea6e7d4835c024e969126d9e4791d7addb99c946cc2032b40918c6e62c8d220") || len(c.Blocks) != 0 || c.Tail == nil ||
		c.Tail.Name != h32(t, "0a0395026a413dfce53c4c029e672af8968dc75c574aba6f29e99189ad930eeb") ||
		c.Tail.Digest != h32(t, "94894ab21cb9450d6f312ce08d7d805d614eb26faf208af42bc3bd0b04430c13") || c.Tail.Tokens != 1 {
		t.Fatalf("tail-only chain %+v", c)
	}
	// A 300-token block (1,232 bytes hashed, two BLAKE3 chunks, staged
	// through the 1 KiB buffer in two writes): b3sum(seed0 || u32le(0..299)).
	toks := make([]uint32, 300)
	for i := range toks {
		toks[i] = uint32(i)
	}
	c, err = ChainKeys(0, toks, 300)
	if err != nil || len(c.Blocks) != 1 || c.Tail != nil || c.Blocks[0] != h32(t, "0a1f1e19185defa776ee6aaae4154911c3edc5524e3b65a5817a95654e093d08") {
		t.Fatalf("300-token block: %+v, %v", c, err)
	}
}

// TestChainPrefixSharing: the property the scheme exists for. Prompts that
// share their first full blocks name them alike, and a longer prompt with
// the same full blocks names its tail alike (with another digest).
func TestChainPrefixSharing(t *testing.T) {
	const fp, bt = 0xfeedface, 4
	a := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	b := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 99, 100, 101}
	d := []uint32{1, 2, 3, 4, 5, 6, 7, 9, 9, 10}
	ca, _ := ChainKeys(fp, a, bt)
	cb, _ := ChainKeys(fp, b, bt)
	cd, _ := ChainKeys(fp, d, bt)
	if len(ca.Blocks) != 2 || ca.Blocks[0] != cb.Blocks[0] || ca.Blocks[1] != cb.Blocks[1] {
		t.Fatalf("shared full blocks named differently: %x vs %x", ca.Blocks, cb.Blocks)
	}
	if ca.Tail.Name != cb.Tail.Name || ca.Tail.Digest == cb.Tail.Digest || ca.Tail.Tokens != 2 || cb.Tail.Tokens != 3 {
		t.Fatalf("tails %+v and %+v: want one name, two digests", ca.Tail, cb.Tail)
	}
	// A change in block 1 changes block 1 and everything after, not block 0.
	if cd.Blocks[0] != ca.Blocks[0] || cd.Blocks[1] == ca.Blocks[1] || cd.Tail.Name == ca.Tail.Name {
		t.Fatalf("a differing block 1 did not split the chain there")
	}
	// A prefix's chain is a prefix of the chain.
	cp, _ := ChainKeys(fp, a[:4], bt)
	if len(cp.Blocks) != 1 || cp.Blocks[0] != ca.Blocks[0] || cp.Tail != nil {
		t.Fatalf("chain of the first block %+v", cp)
	}
	// The fingerprint separates layouts; the tail name is never a block's.
	co, _ := ChainKeys(fp+1, a, bt)
	if co.Blocks[0] == ca.Blocks[0] {
		t.Fatal("two fingerprints share a block name")
	}
	full, _ := ChainKeys(fp, a[:8], bt)
	tailOf := func(c Chain) [ChainHashSize]byte { return c.Tail.Name }
	for _, blk := range full.Blocks {
		if blk == tailOf(ca) {
			t.Fatal("a tail name equals a block hash")
		}
	}
}

func TestChainKeysInvalid(t *testing.T) {
	for _, bt := range []int{0, -1, -128} {
		c, err := ChainKeys(1, []uint32{1, 2}, bt)
		if !errors.Is(err, StatusInvalid) || !strings.Contains(err.Error(), "blockTokens") || c.Blocks != nil || c.Tail != nil {
			t.Errorf("blockTokens %d: %+v, %v; want INVALID naming blockTokens", bt, c, err)
		}
	}
	if c, err := ChainKeys(1, nil, 16); err != nil || len(c.Blocks) != 0 || c.Tail != nil || len(c.ObjectKeys()) != 0 {
		t.Errorf("no tokens: %+v, %v; want an empty chain", c, err)
	}
}

// TestChainKeysInto: with room, the hashes land in the caller's array
// (how libdfkv writes into C memory) and the chain costs no allocation per
// block.
func TestChainKeysInto(t *testing.T) {
	toks := make([]uint32, 16*100+3)
	for i := range toks {
		toks[i] = uint32(i * 7)
	}
	want, err := ChainKeys(42, toks, 16)
	if err != nil {
		t.Fatal(err)
	}
	dst := make([][ChainHashSize]byte, 3, 120)
	got, err := ChainKeysInto(dst, 42, toks, 16)
	if err != nil || len(got.Blocks) != 100 || &got.Blocks[0] != &dst[:1][0] {
		t.Fatalf("ChainKeysInto did not use dst: %d blocks, %v", len(got.Blocks), err)
	}
	for i := range want.Blocks {
		if got.Blocks[i] != want.Blocks[i] {
			t.Fatalf("block %d differs", i)
		}
	}
	if *got.Tail != *want.Tail {
		t.Fatalf("tail %+v, want %+v", got.Tail, want.Tail)
	}
	small := make([][ChainHashSize]byte, 0, 10)
	if got, _ := ChainKeysInto(small, 42, toks, 16); len(got.Blocks) != 100 || got.Blocks[99] != want.Blocks[99] {
		t.Fatal("ChainKeysInto with a short dst")
	}
	// One hasher for the whole chain, one tail: allocations do not grow
	// with the block count.
	allocs := func(n int) float64 {
		return testing.AllocsPerRun(20, func() { _, _ = ChainKeysInto(dst, 42, toks[:16*n+3], 16) })
	}
	if a1, a100 := allocs(1), allocs(100); a100 != a1 || a1 > 4 {
		t.Fatalf("allocations: %v for 1 block, %v for 100; want a few, the same", a1, a100)
	}
}

func TestChainObjectKeys(t *testing.T) {
	var h [ChainHashSize]byte
	for i := range h {
		h[i] = byte(0xa0 + i)
	}
	hx := hex.EncodeToString(h[:])
	if got := string(AppendChainObjectKey([]byte("x"), h)); got != "xdfkv/chain/v1/b3="+hx {
		t.Fatalf("AppendChainObjectKey = %q", got)
	}
	if got := string(AppendChainTailObjectKey(nil, h)); got != "dfkv/chain/v1/tail/b3="+hx {
		t.Fatalf("AppendChainTailObjectKey = %q", got)
	}
	c := Chain{Blocks: [][ChainHashSize]byte{h, {}}, Tail: &ChainTail{Name: h, Tokens: 1}}
	keys := c.ObjectKeys()
	if len(keys) != 3 || len(keys[0]) != chainBlockKeyLen || len(keys[2]) != chainTailKeyLen {
		t.Fatalf("keys %q", keys)
	}
	// Each key is capped at its own end: appending to one never
	// overwrites the next.
	_ = append(keys[0], '!')
	if !bytes.HasPrefix(keys[1], []byte(ChainBlockKeyPrefix)) || string(keys[1]) != ChainBlockKeyPrefix+strings.Repeat("0", 64) {
		t.Fatalf("key 1 %q after an append to key 0", keys[1])
	}
	// Every key is a valid object key of a namespace.
	m, err := NewKeyMapper([]byte("ns"))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if _, err := m.BlockKey(k); err != nil {
			t.Fatalf("BlockKey(%q): %v", k, err)
		}
	}
}

func BenchmarkChainKeys(b *testing.B) {
	toks := make([]uint32, 8192)
	for i := range toks {
		toks[i] = uint32(i)
	}
	dst := make([][ChainHashSize]byte, 0, len(toks))
	for _, bt := range []int{16, 256} {
		b.Run("block-tokens-"+strconv.Itoa(bt), func(b *testing.B) {
			b.SetBytes(int64(4 * len(toks)))
			for b.Loop() {
				_, _ = ChainKeysInto(dst, 1, toks, bt)
			}
		})
	}
}
