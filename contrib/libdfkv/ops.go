package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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

// scratch returns a pooled buffer of n bytes and its release function.
func (s *state) scratch(n uint64) ([]byte, func()) {
	bp, _ := s.sg.Get().(*[]byte)
	if bp == nil || uint64(cap(*bp)) < n {
		b := make([]byte, n)
		bp = &b
	}
	buf := (*bp)[:n]
	return buf, func() { s.sg.Put(bp) }
}

// putSG stores the concatenation of parts. NB: wire/client.Put takes one
// contiguous value, so the parts are copied into a pooled buffer; a
// vectored Put in wire/client would remove this copy.
func (s *state) putSG(key []byte, parts [][]byte) error {
	var total uint64
	for _, p := range parts {
		total += uint64(len(p))
	}
	if total == 0 {
		return fmt.Errorf("scatter-gather put of zero bytes: dfkv stores only non-empty values: %w", wire.StatusInvalid)
	}
	if total > s.maxBlock {
		return fmt.Errorf("scatter-gather value of %d bytes exceeds max_block_bytes %d: %w", total, s.maxBlock, wire.StatusTooLarge)
	}
	buf, done := s.scratch(total)
	defer done()
	off := 0
	for _, p := range parts {
		off += copy(buf[off:], p)
	}
	return s.put(key, buf)
}

// getSG reads key's value and fills parts in order. It reads into a pooled
// buffer and copies out (see putSG).
func (s *state) getSG(key []byte, parts [][]byte) (uint64, error) {
	var total uint64
	for _, p := range parts {
		total += uint64(len(p))
	}
	if total == 0 {
		return 0, fmt.Errorf("scatter-gather get into zero bytes of buffers: %w", wire.StatusInvalid)
	}
	if total > s.maxBlock {
		total = s.maxBlock // no stored value can be longer
	}
	buf, done := s.scratch(total)
	defer done()
	n, stored, err := s.c.Get(context.Background(), key, buf)
	if err != nil && !errors.Is(err, client.ErrBufferTooSmall) {
		return stored, err
	}
	src := buf[:n]
	for _, p := range parts {
		if len(src) == 0 {
			break
		}
		src = src[copy(p, src):]
	}
	return stored, err
}

func (s *state) putBatch(keys, values [][]byte) []error {
	return s.c.PutBatch(context.Background(), keys, values)
}

func (s *state) getBatch(keys, dsts [][]byte) []client.GetResult {
	return s.c.GetBatch(context.Background(), keys, dsts)
}

func (s *state) existBatch(keys [][]byte) []client.ExistResult {
	return s.c.ExistBatch(context.Background(), keys)
}

func (s *state) removeBatch(keys [][]byte) []error {
	return s.c.RemoveBatch(context.Background(), keys)
}

func (s *state) existPrefix(keys [][]byte) (int, error) {
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

// sgRoundBytes bounds the scratch memory of one round of a batch
// scatter-gather call.
const sgRoundBytes = 64 << 20

// sgRounds splits items (with their byte totals) into consecutive rounds
// of at most sgRoundBytes of scratch (at least one item per round).
func sgRounds(totals []uint64) [][2]int {
	var rounds [][2]int
	lo := 0
	var sum uint64
	for i, t := range totals {
		if i > lo && sum+t > sgRoundBytes {
			rounds = append(rounds, [2]int{lo, i})
			lo, sum = i, 0
		}
		sum += t
	}
	if lo < len(totals) {
		rounds = append(rounds, [2]int{lo, len(totals)})
	}
	return rounds
}

// putBatchSG stores each item's concatenated parts. errs[i] already set
// (local failures) are kept and the item skipped.
func (s *state) putBatchSG(keys [][]byte, parts [][][]byte, errs []error) {
	totals := make([]uint64, len(keys))
	for i, ps := range parts {
		for _, p := range ps {
			totals[i] += uint64(len(p))
		}
		if errs[i] == nil && totals[i] > s.maxBlock {
			errs[i] = fmt.Errorf("scatter-gather value of %d bytes exceeds max_block_bytes %d: %w", totals[i], s.maxBlock, wire.StatusTooLarge)
		}
	}
	for _, r := range sgRounds(totals) {
		var ks, vs [][]byte
		var idx []int
		var release []func()
		for i := r[0]; i < r[1]; i++ {
			if errs[i] != nil {
				continue
			}
			buf, done := s.scratch(totals[i])
			off := 0
			for _, p := range parts[i] {
				off += copy(buf[off:], p)
			}
			ks, vs, idx = append(ks, keys[i]), append(vs, buf), append(idx, i)
			release = append(release, done)
		}
		if len(ks) > 0 {
			for j, err := range s.putBatch(ks, vs) {
				errs[idx[j]] = err
			}
		}
		for _, done := range release {
			done()
		}
	}
}

// getBatchSG fills each item's parts in order and returns stored lengths.
func (s *state) getBatchSG(keys [][]byte, parts [][][]byte, errs []error) []uint64 {
	stored := make([]uint64, len(keys))
	totals := make([]uint64, len(keys))
	for i, ps := range parts {
		for _, p := range ps {
			totals[i] += uint64(len(p))
		}
		totals[i] = min(totals[i], s.maxBlock)
	}
	for _, r := range sgRounds(totals) {
		var ks, ds [][]byte
		var idx []int
		var release []func()
		for i := r[0]; i < r[1]; i++ {
			if errs[i] != nil {
				continue
			}
			buf, done := s.scratch(totals[i])
			ks, ds, idx = append(ks, keys[i]), append(ds, buf), append(idx, i)
			release = append(release, done)
		}
		if len(ks) > 0 {
			for j, res := range s.getBatch(ks, ds) {
				i := idx[j]
				stored[i], errs[i] = res.Stored, res.Err
				if res.Err != nil && !errors.Is(res.Err, client.ErrBufferTooSmall) {
					continue
				}
				src := res.Data
				for _, p := range parts[i] {
					if len(src) == 0 {
						break
					}
					src = src[copy(p, src):]
				}
			}
		}
		for _, done := range release {
			done()
		}
	}
	return stored
}
