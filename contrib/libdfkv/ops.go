package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/dfkv/dfkv/wire"
	"github.com/dfkv/dfkv/wire/client"
)

// The plain Go side of every export: Go slices in, an error wrapping a
// wire.Status out. Nothing here knows about C.

func (s *state) put(key, value []byte) error {
	return s.c.Put(context.Background(), key, value)
}

// get reads key into dst and returns the stored length.
func (s *state) get(key, dst []byte) (uint64, error) {
	_, stored, err := s.c.Get(context.Background(), key, dst)
	return stored, err
}

func (s *state) getRange(key []byte, off, length uint64, dst []byte) (int, uint64, error) {
	return s.c.GetRange(context.Background(), key, off, length, dst)
}

func (s *state) exist(key []byte) (uint64, error) {
	return s.c.Exist(context.Background(), key)
}

func (s *state) remove(key []byte) error {
	return s.c.Remove(context.Background(), key)
}

// putSG stores the concatenation of parts; the Go client writes them to
// the socket in place (vectored writes), with no staging copy.
func (s *state) putSG(key []byte, parts [][]byte) error {
	return s.c.PutV(context.Background(), key, parts)
}

// getSG reads key's value into parts in order, straight from the socket,
// and returns the stored length.
func (s *state) getSG(key []byte, parts [][]byte) (uint64, error) {
	_, stored, err := s.c.GetV(context.Background(), key, parts)
	return stored, err
}

func (s *state) putBatch(keys, values [][]byte) []error {
	return s.c.PutBatch(context.Background(), keys, values)
}

func (s *state) getBatch(keys, dsts [][]byte) []client.GetResult {
	return s.c.GetBatch(context.Background(), keys, dsts)
}

func (s *state) existBatch(keys [][]byte, pin bool) []client.ExistResult {
	if pin {
		return s.c.ExistBatchPinned(context.Background(), keys)
	}
	return s.c.ExistBatch(context.Background(), keys)
}

func (s *state) removeBatch(keys [][]byte) []error {
	return s.c.RemoveBatch(context.Background(), keys)
}

func (s *state) existPrefix(keys [][]byte, pin bool) (int, error) {
	if pin {
		return s.c.ExistPrefixPinned(context.Background(), keys)
	}
	return s.c.ExistPrefix(context.Background(), keys)
}

// stats returns {"member": <STATS JSON> | {"error": "..."}, ...} in member
// order.
func (s *state) stats() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, addr := range s.c.Members() {
		if i > 0 {
			b.WriteByte(',')
		}
		name, _ := json.Marshal(addr)
		b.Write(name)
		b.WriteByte(':')
		doc, err := s.c.Stats(context.Background(), addr)
		switch {
		case err != nil:
			e, _ := json.Marshal(map[string]string{"error": err.Error(), "status": wire.StatusOf(err).String()})
			b.Write(e)
		case json.Valid(doc):
			b.Write(bytes.TrimSpace(doc))
		default:
			e, _ := json.Marshal(map[string]string{"raw": string(doc)})
			b.Write(e)
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// pending lists the items of a batch that have not failed locally
// (errs[i] == nil), so only they are sent.
func pending(errs []error) []int {
	idx := make([]int, 0, len(errs))
	for i, err := range errs {
		if err == nil {
			idx = append(idx, i)
		}
	}
	return idx
}

// putBatchSG stores each item's concatenated parts in place. errs[i]
// already set (local failures) are kept and the item skipped.
func (s *state) putBatchSG(keys [][]byte, parts [][][]byte, errs []error) {
	idx := pending(errs)
	ks, ps := make([][]byte, len(idx)), make([][][]byte, len(idx))
	for j, i := range idx {
		ks[j], ps[j] = keys[i], parts[i]
	}
	for j, err := range s.c.PutBatchV(context.Background(), ks, ps) {
		errs[idx[j]] = err
	}
}

// getBatchSG fills each item's parts in order, straight from the socket,
// and returns stored lengths. With offsets (nil: from the first byte) item
// i is read from byte offsets[i] of its value. errs[i] already set are
// kept, as in putBatchSG.
func (s *state) getBatchSG(keys [][]byte, offsets []uint64, parts [][][]byte, errs []error) []uint64 {
	stored := make([]uint64, len(keys))
	idx := pending(errs)
	ks, ps := make([][]byte, len(idx)), make([][][]byte, len(idx))
	for j, i := range idx {
		ks[j], ps[j] = keys[i], parts[i]
	}
	var res []client.GetResult
	if offsets == nil {
		res = s.c.GetBatchV(context.Background(), ks, ps)
	} else {
		offs := make([]uint64, len(idx))
		for j, i := range idx {
			offs[j] = offsets[i]
		}
		res = s.c.GetBatchRangeV(context.Background(), ks, offs, ps)
	}
	for j, r := range res {
		stored[idx[j]], errs[idx[j]] = r.Stored, r.Err
	}
	return stored
}

// maxChainTokens bounds n_tokens of dfkv_chain_keys (4 Gi tokens, 16 GiB
// of ids), so a garbage count is refused rather than read as a prompt.
const maxChainTokens = 1 << 32

// chainCount checks dfkv_chain_keys' sizes and returns the number of full
// blocks. When hashes, which holds capacity hashes, is too small, the
// error is TOO_LARGE and the count is still returned: the caller learns
// how many to make room for.
func chainCount(nTokens, blockTokens, capacity uint64) (uint64, error) {
	switch {
	case blockTokens == 0:
		return 0, fmt.Errorf("block_tokens is 0; it must be at least 1: %w", wire.StatusInvalid)
	case nTokens > maxChainTokens:
		return 0, fmt.Errorf("n_tokens %d is over the limit %d: %w", nTokens, uint64(maxChainTokens), wire.StatusInvalid)
	}
	n := nTokens / blockTokens
	if n > capacity {
		return n, fmt.Errorf("%d tokens in blocks of %d make %d full blocks, and out_hashes holds %d (out_capacity_blocks): pass room for %d hashes (%d bytes): %w",
			nTokens, blockTokens, n, capacity, n, n*wire.ChainHashSize, wire.StatusTooLarge)
	}
	return n, nil
}

// chainInto computes the chain of tokens with wire.ChainKeysInto, writing
// the block hashes into hashes, which has exactly chainCount's length, and
// returns the tail (nil when there is none).
func chainInto(fingerprint uint64, tokens []uint32, blockTokens uint64, hashes [][wire.ChainHashSize]byte) (*wire.ChainTail, error) {
	// A block longer than the tokens makes no full block and the same
	// tail whatever its length, so any length past them is as good as
	// len+1, which fits an int.
	bt := int(min(blockTokens, uint64(len(tokens))+1))
	c, err := wire.ChainKeysInto(hashes[:0], fingerprint, tokens, bt)
	if err != nil {
		return nil, err
	}
	if len(c.Blocks) != len(hashes) || (len(hashes) > 0 && &c.Blocks[0] != &hashes[0]) {
		return nil, fmt.Errorf("chain of %d blocks not written in place into %d hashes: %w", len(c.Blocks), len(hashes), wire.StatusInternal)
	}
	return c.Tail, nil
}
