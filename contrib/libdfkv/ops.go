package main

import (
	"bytes"
	"context"
	"encoding/json"

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
