package wire

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"testing"
)

// The chain-key golden vectors live in testdata/chain_golden.json, read by
// these tests and by the Python client's tests (through the C ABI). The
// inputs are chainGoldenInputs below; `go test ./wire -run TestGolden
// -update` rewrites the file from them, with the identity vectors. Review
// the diff: a changed expected value is a cache identity change.

const chainGoldenPath = "testdata/chain_golden.json"

type chainGoldenFile struct {
	Schema      map[string]string    `json:"_schema"`
	KeyPrefixes chainGoldenPrefixes  `json:"key_prefixes"`
	Cases       []chainGoldenCase    `json:"cases"`
	Invalid     []chainGoldenInvalid `json:"invalid"`
}

type chainGoldenPrefixes struct {
	Block string `json:"block"`
	Tail  string `json:"tail"`
}

type chainGoldenTail struct {
	Name   string `json:"name"`
	Digest string `json:"digest"`
	Tokens int    `json:"tokens"`
}

type chainGoldenCase struct {
	Name        string           `json:"name"`
	Fingerprint string           `json:"fingerprint"`
	BlockTokens int              `json:"block_tokens"`
	Tokens      []uint32         `json:"tokens"`
	Seed        string           `json:"seed"`
	Blocks      []string         `json:"blocks"`
	Tail        *chainGoldenTail `json:"tail"`
	ObjectKeys  []string         `json:"object_keys"`
}

type chainGoldenInvalid struct {
	Name        string   `json:"name"`
	Fingerprint string   `json:"fingerprint"`
	BlockTokens int      `json:"block_tokens"`
	Tokens      []uint32 `json:"tokens"`
	Reason      string   `json:"reason"`
}

var chainGoldenSchema = map[string]string{
	"about": "dfkv block-prefix chain key golden vectors (wire/chain.go). " +
		"Regenerate with `go test ./wire -run TestGolden -update` and review the diff: a changed expected value is a cache-identity change.",
	"encoding": "fingerprint is 16 lower-case hex digits of the u64 layout fingerprint; tokens are the u32 token ids; " +
		"seed, blocks and the tail's name and digest are 64 lower-case hex digits of 32-byte BLAKE3 hashes; object keys are ASCII strings.",
	"key_prefixes": "what opens a block's and a tail's object key; 64 hex digits of the block hash or tail name follow.",
	"cases": "H = BLAKE3-256. seed = H(\"DFKVCHAIN1\" || u64le(fingerprint)); blocks[0] = H(seed || u32le of the first block_tokens tokens), " +
		"blocks[k] = H(blocks[k-1] || u32le of block k's tokens), full blocks only. tail (null when len(tokens) is a multiple of block_tokens): " +
		"with P the last block (seed when none), name = H(P || \"tail\"), digest = H(P || u32le of the trailing tokens), tokens = their count. " +
		"object_keys = one key per block in order, then the tail's.",
	"invalid": "inputs that must fail with INVALID (reason is informative only).",
}

func chainGoldenInputs() []struct {
	name        string
	fingerprint uint64
	blockTokens int
	tokens      []uint32
} {
	seq := func(lo, hi uint32) []uint32 {
		var s []uint32
		for t := lo; t < hi; t++ {
			s = append(s, t)
		}
		return s
	}
	vllm := LayoutFingerprint(vllmFingerprintFields...)
	return []struct {
		name        string
		fingerprint uint64
		blockTokens int
		tokens      []uint32
	}{
		{"empty", 0x0123456789abcdef, 16, []uint32{}},
		{"tail-only", 0x0123456789abcdef, 16, seq(1, 6)},
		{"exact-multiple", 0x0123456789abcdef, 4, seq(0, 12)},
		{"blocks-and-tail", 0x0123456789abcdef, 2, seq(1, 6)},
		{"block-size-1", 0x0123456789abcdef, 1, []uint32{7, 8, 9}},
		{"large-token-ids", 0x0123456789abcdef, 2, []uint32{0xffffffff, 0, 0xffffffff, 0x80000000, 0xffffffff}},
		{"fingerprint-0", 0, 4, seq(1, 11)},
		{"fingerprint-1", 1, 4, seq(1, 11)},
		{"vllm-fingerprint", vllm, 16, seq(100, 140)},
		{"shared-prefix-a", vllm, 4, seq(1, 11)},
		{"shared-prefix-b", vllm, 4, append(seq(1, 9), 99, 100, 101)},
		// 300 tokens are 1,200 bytes after a 32-byte parent: a block
		// spanning two BLAKE3 chunks.
		{"multi-chunk-block", 0, 300, seq(0, 301)},
	}
}

func chainGoldenVectors() (chainGoldenFile, error) {
	g := chainGoldenFile{
		Schema:      chainGoldenSchema,
		KeyPrefixes: chainGoldenPrefixes{Block: ChainBlockKeyPrefix, Tail: ChainTailKeyPrefix},
	}
	for _, v := range chainGoldenInputs() {
		c, err := ChainKeys(v.fingerprint, v.tokens, v.blockTokens)
		if err != nil {
			return g, err
		}
		seed := ChainSeed(v.fingerprint)
		gc := chainGoldenCase{
			Name: v.name, Fingerprint: u64hex(v.fingerprint), BlockTokens: v.blockTokens, Tokens: v.tokens,
			Seed: hex.EncodeToString(seed[:]), Blocks: []string{}, ObjectKeys: []string{},
		}
		for _, b := range c.Blocks {
			gc.Blocks = append(gc.Blocks, hex.EncodeToString(b[:]))
		}
		if c.Tail != nil {
			gc.Tail = &chainGoldenTail{Name: hex.EncodeToString(c.Tail.Name[:]), Digest: hex.EncodeToString(c.Tail.Digest[:]), Tokens: c.Tail.Tokens}
		}
		for _, k := range c.ObjectKeys() {
			gc.ObjectKeys = append(gc.ObjectKeys, string(k))
		}
		g.Cases = append(g.Cases, gc)
	}
	g.Invalid = []chainGoldenInvalid{
		{"zero-block-tokens", u64hex(0), 0, []uint32{1, 2, 3}, "block_tokens is 0"},
		{"zero-block-tokens-no-tokens", u64hex(0), 0, []uint32{}, "block_tokens is 0, even with nothing to hash"},
		{"negative-block-tokens", u64hex(0), -1, []uint32{1}, "block_tokens is negative"},
	}
	return g, nil
}

func marshalChainGolden(g chainGoldenFile) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(g); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func loadChainGolden(t *testing.T) chainGoldenFile {
	t.Helper()
	raw, err := os.ReadFile(chainGoldenPath)
	if err != nil {
		t.Fatalf("read chain golden vectors: %v (generate with: go test ./wire -run TestGolden -update)", err)
	}
	var g chainGoldenFile
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&g); err != nil {
		t.Fatalf("parse %s: %v", chainGoldenPath, err)
	}
	return g
}

// TestGoldenChainUpToDate is TestGoldenUpToDate for the chain vectors.
func TestGoldenChainUpToDate(t *testing.T) {
	g, err := chainGoldenVectors()
	if err != nil {
		t.Fatal(err)
	}
	want, err := marshalChainGolden(g)
	if err != nil {
		t.Fatal(err)
	}
	if updateGolden() {
		if err := os.WriteFile(chainGoldenPath, want, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s (%d bytes); review the diff", chainGoldenPath, len(want))
		return
	}
	got, err := os.ReadFile(chainGoldenPath)
	if err != nil {
		t.Fatalf("read %s: %v (generate with: go test ./wire -run TestGolden -update)", chainGoldenPath, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is stale or edited by hand: regenerate with `go test ./wire -run TestGolden -update` and review the diff", chainGoldenPath)
	}
}

// TestGoldenChainVectors checks every case of the checked-in file,
// recomputed from the inputs stored in the file itself (what the Python
// tests do too, through the C ABI).
func TestGoldenChainVectors(t *testing.T) {
	g := loadChainGolden(t)
	if g.KeyPrefixes.Block != ChainBlockKeyPrefix || g.KeyPrefixes.Tail != ChainTailKeyPrefix {
		t.Errorf("key prefixes %+v, want %q and %q", g.KeyPrefixes, ChainBlockKeyPrefix, ChainTailKeyPrefix)
	}
	if len(g.Cases) == 0 || len(g.Invalid) == 0 {
		t.Fatal("chain golden file has an empty section")
	}
	for _, v := range g.Cases {
		fp := chainFingerprint(t, v.Fingerprint)
		c, err := ChainKeys(fp, v.Tokens, v.BlockTokens)
		if err != nil {
			t.Errorf("%s: %v", v.Name, err)
			continue
		}
		seed := ChainSeed(fp)
		got := chainGoldenCase{
			Name: v.Name, Fingerprint: v.Fingerprint, BlockTokens: v.BlockTokens, Tokens: v.Tokens,
			Seed: hex.EncodeToString(seed[:]), Blocks: []string{}, ObjectKeys: []string{},
		}
		for _, b := range c.Blocks {
			got.Blocks = append(got.Blocks, hex.EncodeToString(b[:]))
		}
		if c.Tail != nil {
			got.Tail = &chainGoldenTail{Name: hex.EncodeToString(c.Tail.Name[:]), Digest: hex.EncodeToString(c.Tail.Digest[:]), Tokens: c.Tail.Tokens}
		}
		for _, k := range c.ObjectKeys() {
			got.ObjectKeys = append(got.ObjectKeys, string(k))
		}
		if !reflect.DeepEqual(got, v) {
			t.Errorf("%s:\n got %+v\nwant %+v", v.Name, got, v)
		}
		if n := len(v.Tokens) / v.BlockTokens; len(v.Blocks) != n || (v.Tail != nil) != (len(v.Tokens)%v.BlockTokens != 0) {
			t.Errorf("%s: %d blocks and tail %v for %d tokens in blocks of %d", v.Name, len(v.Blocks), v.Tail, len(v.Tokens), v.BlockTokens)
		}
	}
	for _, v := range g.Invalid {
		if c, err := ChainKeys(chainFingerprint(t, v.Fingerprint), v.Tokens, v.BlockTokens); !errors.Is(err, StatusInvalid) {
			t.Errorf("invalid %s (%s): ChainKeys = %+v, %v; want INVALID", v.Name, v.Reason, c, err)
		}
	}
}

func chainFingerprint(t *testing.T, s string) uint64 {
	t.Helper()
	b := mustHex(t, "fingerprint", s)
	if len(b) != 8 {
		t.Fatalf("fingerprint %q is not 16 hex digits", s)
	}
	var fp uint64
	for _, x := range b {
		fp = fp<<8 | uint64(x)
	}
	return fp
}
