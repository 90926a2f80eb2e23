package wire

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"

	"lukechampine.com/blake3"
)

// Block-prefix chain keys: content-addressed names of KV blocks computed
// from token ids, for an engine that hands the connector token ids rather
// than block hashes of its own. Two prompts that share their first M full
// blocks of tokens name those M blocks identically, so a later request
// finds the blocks an earlier one stored (prefix sharing by content).
//
// H is BLAKE3 with a 32-byte output; u64le and u32le are little-endian
// integers; || is concatenation. For the namespace's layout fingerprint
// F (LayoutFingerprint, field 6 of the namespace descriptor), token ids
// t[0..n) (each a u32) and B tokens per block (B >= 1):
//
//	seed      = H("DFKVCHAIN1" || u64le(F))
//	tok(i, j) = u32le(t[i]) || u32le(t[i+1]) || ... || u32le(t[j-1])
//	chain[0]  = H(seed || tok(0, B))
//	chain[k]  = H(chain[k-1] || tok(k*B, (k+1)*B))   for k < n/B (full blocks only)
//
// The n%B trailing tokens, when there are any, are the tail. Its parent P
// is chain[n/B - 1], or seed when there is no full block:
//
//	tail name   = H(P || "tail")       (the 4 ASCII bytes)
//	tail digest = H(P || tok(n/B*B, n))
//
// The tail name depends on the parent alone, so a later, longer prompt
// with the same full blocks writes its tail under the same name and
// replaces the shorter one; the digest is what a caller stores with the
// tail's value (or compares against) to tell whether a stored tail holds
// the same tokens. The tail token count is n%B.
//
// The object keys a client stores under are ASCII, with 64 lower-case hex
// digits of a 32-byte hash:
//
//	block k: "dfkv/chain/v1/b3=" || hex(chain[k])
//	tail:    "dfkv/chain/v1/tail/b3=" || hex(tail name)
//
// and go through the namespace's KeyMapper like any other object key. B
// is not hashed into seed: use one block size per namespace (a canonical
// descriptor carries it in field 7), or the tails of prompts shorter than
// one block, whose parent is seed, share a name across block sizes.
// Every constant here is part of the cache identity; a different
// construction needs a new domain and a new key version.
// testdata/chain_golden.json holds the vectors the Python client checks.

// Chain key constants.
const (
	// ChainHashSize is the size of a chain hash, a tail name and a tail
	// digest.
	ChainHashSize = 32
	// ChainBlockKeyPrefix opens the object key of a full block.
	ChainBlockKeyPrefix = "dfkv/chain/v1/b3="
	// ChainTailKeyPrefix opens the object key of a tail.
	ChainTailKeyPrefix = "dfkv/chain/v1/tail/b3="
)

// chainDomain separates the chain seed from every other hash input.
const chainDomain = "DFKVCHAIN1"

// chainTailLabel is hashed after the parent to name the tail.
const chainTailLabel = "tail"

// Chain is the chain of one token sequence: the hash of every full block,
// in order, and the tail of the trailing partial block (nil when the
// tokens fill whole blocks).
type Chain struct {
	Blocks [][ChainHashSize]byte
	Tail   *ChainTail
}

// ChainTail names the trailing partial block of a token sequence.
type ChainTail struct {
	Name   [ChainHashSize]byte // H(parent || "tail"): what the tail's object key names
	Digest [ChainHashSize]byte // H(parent || tail tokens): which tokens it holds
	Tokens int                 // tokens in the tail, 1..blockTokens-1
}

// ChainSeed returns H("DFKVCHAIN1" || u64le(fingerprint)), the parent of
// the first block.
func ChainSeed(fingerprint uint64) [ChainHashSize]byte {
	return newChainer().seed(fingerprint)
}

// ChainKeys computes the chain of tokens in blocks of blockTokens for the
// layout fingerprint of the namespace. A blockTokens below 1 fails with an
// error wrapping StatusInvalid. No tokens is an empty chain with no tail.
// This is the one implementation: the C ABI (dfkv_chain_keys) and the
// Python client (dfkv.chain_keys) call it.
func ChainKeys(fingerprint uint64, tokens []uint32, blockTokens int) (Chain, error) {
	return ChainKeysInto(nil, fingerprint, tokens, blockTokens)
}

// ChainKeysInto is ChainKeys writing the block hashes into dst's backing
// array when cap(dst) holds len(tokens)/blockTokens of them (Blocks is then
// dst[:n]), and into one new array otherwise. dst's contents are
// overwritten, not kept. Its allocations do not grow with the number of
// blocks.
func ChainKeysInto(dst [][ChainHashSize]byte, fingerprint uint64, tokens []uint32, blockTokens int) (Chain, error) {
	if blockTokens < 1 {
		return Chain{}, fmt.Errorf("chain keys: blockTokens is %d; it must be at least 1: %w", blockTokens, StatusInvalid)
	}
	n := len(tokens) / blockTokens
	if cap(dst) >= n {
		dst = dst[:n]
	} else {
		dst = make([][ChainHashSize]byte, n)
	}
	ch := newChainer()
	parent := ch.seed(fingerprint)
	for k := range dst {
		parent = ch.link(parent, tokens[k*blockTokens:(k+1)*blockTokens], "")
		dst[k] = parent
	}
	c := Chain{Blocks: dst}
	if rest := tokens[n*blockTokens:]; len(rest) > 0 {
		c.Tail = &ChainTail{
			Name:   ch.link(parent, nil, chainTailLabel),
			Digest: ch.link(parent, rest, ""),
			Tokens: len(rest),
		}
	}
	return c, nil
}

// chainer hashes with one hasher, one staging buffer and one output, all
// in one allocation, so a chain costs nothing per block.
type chainer struct {
	h   blake3.Hasher
	buf [1024]byte // BLAKE3's chunk size: a write of it never fans out
	sum [ChainHashSize]byte
}

func newChainer() *chainer {
	c := new(chainer)
	c.h = *blake3.New(ChainHashSize, nil)
	return c
}

// seed returns H(chainDomain || u64le(fingerprint)).
func (c *chainer) seed(fingerprint uint64) [ChainHashSize]byte {
	c.h.Reset()
	n := copy(c.buf[:], chainDomain)
	binary.LittleEndian.PutUint64(c.buf[n:], fingerprint)
	c.h.Write(c.buf[:n+8])
	c.h.Sum(c.sum[:0])
	return c.sum
}

// link returns H(parent || u32le of each token || label).
func (c *chainer) link(parent [ChainHashSize]byte, tokens []uint32, label string) [ChainHashSize]byte {
	c.h.Reset()
	n := copy(c.buf[:], parent[:])
	for {
		m := min(len(tokens), (len(c.buf)-n)/4)
		for i, t := range tokens[:m] {
			binary.LittleEndian.PutUint32(c.buf[n+4*i:], t)
		}
		n += 4 * m
		tokens = tokens[m:]
		if len(tokens) == 0 {
			break
		}
		c.h.Write(c.buf[:n])
		n = 0
	}
	if len(c.buf)-n < len(label) {
		c.h.Write(c.buf[:n])
		n = 0
	}
	n += copy(c.buf[n:], label)
	c.h.Write(c.buf[:n])
	c.h.Sum(c.sum[:0])
	return c.sum
}

// AppendChainObjectKey appends the object key of a full block,
// ChainBlockKeyPrefix and the hash in lower-case hex, to dst.
func AppendChainObjectKey(dst []byte, hash [ChainHashSize]byte) []byte {
	return hex.AppendEncode(append(dst, ChainBlockKeyPrefix...), hash[:])
}

// AppendChainTailObjectKey appends the object key of a tail,
// ChainTailKeyPrefix and its name in lower-case hex, to dst.
func AppendChainTailObjectKey(dst []byte, name [ChainHashSize]byte) []byte {
	return hex.AppendEncode(append(dst, ChainTailKeyPrefix...), name[:])
}

// Chain object key lengths.
const (
	chainBlockKeyLen = len(ChainBlockKeyPrefix) + 2*ChainHashSize
	chainTailKeyLen  = len(ChainTailKeyPrefix) + 2*ChainHashSize
)

// ObjectKeys renders the object keys of the chain: one per block, in
// order, then the tail's when there is one. The keys share one backing
// array; pass them to ExistPrefix (wire/client) to learn how many leading
// blocks are stored.
func (c Chain) ObjectKeys() [][]byte {
	n := len(c.Blocks) * chainBlockKeyLen
	keys := make([][]byte, 0, len(c.Blocks)+1)
	if c.Tail != nil {
		n += chainTailKeyLen
	}
	buf := make([]byte, 0, n)
	for _, h := range c.Blocks {
		buf = AppendChainObjectKey(buf, h)
		keys = append(keys, buf[len(buf)-chainBlockKeyLen:len(buf):len(buf)])
	}
	if c.Tail != nil {
		buf = AppendChainTailObjectKey(buf, c.Tail.Name)
		keys = append(keys, buf[len(buf)-chainTailKeyLen:len(buf):len(buf)])
	}
	return keys
}
