package client

import (
	"context"
	"fmt"
	"net"

	"github.com/dfkv/dfkv/wire"
)

// Vectored (scatter-gather) calls: a value is the concatenation of the
// caller's parts, which are written to the socket and read from it in
// place. An engine's KV block is usually several pieces of its paged
// buffers (a K and a V plane, one slice per layer); these calls move them
// without assembling the value in a staging buffer first.

// sumParts is the total length of parts.
func sumParts(parts [][]byte) uint64 {
	var n uint64
	for _, p := range parts {
		n += uint64(len(p))
	}
	return n
}

// checkParts is checkValue for the concatenation of parts.
func checkParts(parts [][]byte, maxBlock uint64) error {
	total := sumParts(parts)
	if total == 0 {
		return fmt.Errorf("scatter-gather value of zero bytes: dfkv stores only non-empty values: %w", wire.StatusInvalid)
	}
	if total > maxBlock {
		return fmt.Errorf("scatter-gather value of %d bytes exceeds max_block_bytes %d: %w", total, maxBlock, wire.StatusTooLarge)
	}
	return nil
}

// PutV stores the concatenation of parts under key. The parts are written
// to the connection as they are (vectored writes), never copied into one
// buffer.
func (c *Client) PutV(ctx context.Context, key []byte, parts [][]byte) error {
	k, err := c.keyOf(key)
	if err != nil {
		return err
	}
	if err := checkParts(parts, c.opts.MaxBlockBytes); err != nil {
		return err
	}
	p := c.route(k)
	return c.exchange(ctx, p, c.deadline(ctx), false, func(cc *cconn) error {
		cc.wbuf = wire.AppendRequest(cc.wbuf, &wire.RequestHeader{Op: wire.OpPut, Key: k, BodyLen: sumParts(parts)})
		cc.queue(parts)
		if err := cc.flushv(); err != nil {
			return err
		}
		h, err := cc.readHeader()
		if err == nil {
			return cc.noBody(h, wire.OpPut)
		}
		if wire.StatusOf(err) == wire.StatusTooLarge {
			cc.broken = true // as in Put
		}
		return err
	})
}

// GetV reads key's value into parts in order, straight from the
// connection, and returns the bytes read and the stored length. A value
// shorter than the parts fills a prefix of them; a longer one fills them
// all and returns ErrBufferTooSmall, like Get.
func (c *Client) GetV(ctx context.Context, key []byte, parts [][]byte) (n int, stored uint64, err error) {
	k, err := c.keyOf(key)
	if err != nil {
		return 0, 0, err
	}
	want := min(sumParts(parts), c.opts.MaxBlockBytes)
	if want == 0 {
		return 0, 0, fmt.Errorf("scatter-gather get into zero bytes of buffers: %w", wire.StatusInvalid)
	}
	p := c.route(k)
	err = c.exchange(ctx, p, c.deadline(ctx), true, func(cc *cconn) error {
		cc.wbuf = wire.AppendRequest(cc.wbuf, &wire.RequestHeader{Op: wire.OpGet, Key: k, Length: want})
		if err := cc.send(nil); err != nil {
			return err
		}
		h, err := cc.readHeaderFor(want)
		stored = h.Stored
		if err != nil {
			return err
		}
		if exp, _ := wire.RangeLen(h.Stored, 0, want); h.BodyLen != exp {
			cc.broken = true
			return fmt.Errorf("node answered %d bytes for a %d-byte read of a %d-byte value, not %d: %w",
				h.BodyLen, want, h.Stored, exp, wire.StatusInvalid)
		}
		n = int(h.BodyLen)
		return cc.readParts(parts, h.BodyLen)
	})
	if err == nil && stored > want {
		err = ErrBufferTooSmall
	}
	return n, stored, err
}

// PutBatchV stores the concatenation of parts[i] under keys[i] and returns
// one error per item, like PutBatch; every part goes to its node in place.
func (c *Client) PutBatchV(ctx context.Context, keys [][]byte, parts [][][]byte) []error {
	errs := make([]error, len(keys))
	if len(parts) != len(keys) {
		for i := range errs {
			errs[i] = fmt.Errorf("PutBatchV: %d keys but %d part lists: %w", len(keys), len(parts), wire.StatusInvalid)
		}
		return errs
	}
	for i, ps := range parts {
		if err := checkParts(ps, c.opts.MaxBlockBytes); err != nil {
			errs[i] = err
		}
	}
	return c.putBatch(ctx, keys, errs, func(i int) uint64 { return sumParts(parts[i]) },
		func(cc *cconn, idx []int) error {
			for _, i := range idx {
				cc.queue(parts[i])
			}
			return cc.flushv()
		},
		func(i int, dst []byte) {
			for _, p := range parts[i] {
				dst = dst[copy(dst, p):]
			}
		}, nil)
}

// GetBatchV reads keys[i] into parts[i] in order, straight from the
// connection. Each result's Stored is the stored length and Data is nil;
// the bytes read are min(Stored, total length of parts[i]). A value longer
// than its parts fills them and fails with ErrBufferTooSmall.
func (c *Client) GetBatchV(ctx context.Context, keys [][]byte, parts [][][]byte) []GetResult {
	res := make([]GetResult, len(keys))
	if len(parts) != len(keys) {
		for i := range res {
			res[i].Err = fmt.Errorf("GetBatchV: %d keys but %d part lists: %w", len(keys), len(parts), wire.StatusInvalid)
		}
		return res
	}
	wants := make([]uint64, len(keys))
	for i, ps := range parts {
		if wants[i] = min(sumParts(ps), c.opts.MaxBlockBytes); wants[i] == 0 {
			res[i].Err = fmt.Errorf("scatter-gather get into zero bytes of buffers: %w", wire.StatusInvalid)
		}
	}
	return c.getBatch(ctx, keys, res, atStart, func(i int) uint64 { return wants[i] }, nil,
		func(cc *cconn, i int, r *GetResult, n uint64) error {
			if err := cc.readParts(parts[i], n); err != nil {
				return err
			}
			if r.Stored > wants[i] {
				r.Err = ErrBufferTooSmall
			}
			return nil
		})
}

// GetBatchRangeV reads, for each item, the total length of parts[i] from
// keys[i]'s value starting at byte offsets[i], into parts[i] in order,
// straight from the connection: one layer's slice of many blocks stored
// layer after layer, say, without reading the rest of each block. Each
// result's Stored is the whole stored length (so a caller can tell a
// value of the wrong size from the first range it reads) and Data is nil.
// The bytes read are min(Stored-offsets[i], total length of parts[i]): a
// value that ends inside the range fills a prefix of the parts, and an
// offset equal to the stored length reads nothing, both without error; an
// offset past it fails that item with INVALID. Parts totalling zero bytes
// are refused (a zero length would read to the end of the value), as are
// parts longer than max_block_bytes (no single read can return them).
func (c *Client) GetBatchRangeV(ctx context.Context, keys [][]byte, offsets []uint64, parts [][][]byte) []GetResult {
	res := make([]GetResult, len(keys))
	if len(parts) != len(keys) || len(offsets) != len(keys) {
		for i := range res {
			res[i].Err = fmt.Errorf("GetBatchRangeV: %d keys, %d offsets and %d part lists: %w", len(keys), len(offsets), len(parts), wire.StatusInvalid)
		}
		return res
	}
	wants := make([]uint64, len(keys))
	for i, ps := range parts {
		switch wants[i] = sumParts(ps); {
		case wants[i] == 0:
			res[i].Err = fmt.Errorf("ranged scatter-gather get into zero bytes of buffers: %w", wire.StatusInvalid)
		case wants[i] > c.opts.MaxBlockBytes:
			res[i].Err = fmt.Errorf("ranged scatter-gather get of %d bytes exceeds max_block_bytes %d: %w", wants[i], c.opts.MaxBlockBytes, wire.StatusTooLarge)
		}
	}
	return c.getBatch(ctx, keys, res, func(i int) uint64 { return offsets[i] }, func(i int) uint64 { return wants[i] }, nil,
		func(cc *cconn, i int, r *GetResult, n uint64) error {
			return cc.readParts(parts[i], n)
		})
}

// maxKeptIovecs bounds the part lists a pooled connection keeps for reuse
// (a few pages' worth of slice headers); a larger call's lists go to the
// garbage collector.
const maxKeptIovecs = 4096

// queue adds parts to the body the next flushv sends after wbuf.
func (cc *cconn) queue(parts [][]byte) { cc.vec = append(cc.vec, parts...) }

// flushv writes wbuf and then every queued part, in place, with vectored
// writes of at most progressPiece body bytes each (a long body shows its
// progress as it moves, as send's does). Parts are never copied.
func (cc *cconn) flushv() error {
	var err error
	head := cc.wbuf
	i, off := 0, 0 // the next byte to send: cc.vec[i][off]
	for {
		round := cc.round[:0]
		if len(head) > 0 {
			round, head = append(round, head), nil
		}
		size := 0
		for i < len(cc.vec) && size < progressPiece {
			p := cc.vec[i][off:]
			take := min(len(p), progressPiece-size)
			if take > 0 {
				round = append(round, p[:take])
				size += take
			}
			if off += take; off == len(cc.vec[i]) {
				i, off = i+1, 0
			}
		}
		cc.round = round
		if len(round) == 0 {
			break
		}
		bufs := net.Buffers(round)
		if _, err = bufs.WriteTo(cc.nc); err != nil {
			break
		}
		cc.sent(size)
		if i >= len(cc.vec) {
			break
		}
	}
	cc.wbuf = cc.wbuf[:0]
	cc.vec = forget(cc.vec)
	cc.round = forget(cc.round)
	if err != nil {
		cc.broken = true
		if refused := cc.refusal(err); refused != nil {
			return refused
		}
	}
	return err
}

// forget empties a part list, dropping its references to caller memory,
// and keeps its array for reuse unless it grew past maxKeptIovecs.
func forget(v [][]byte) [][]byte {
	if cap(v) > maxKeptIovecs {
		return nil
	}
	clear(v[:cap(v)])
	return v[:0]
}

// readParts reads the next n body bytes into parts in order (n is at most
// their total length), each with readValue.
func (cc *cconn) readParts(parts [][]byte, n uint64) error {
	for _, p := range parts {
		if n == 0 {
			break
		}
		take := min(uint64(len(p)), n)
		if err := cc.readValue(p[:take]); err != nil {
			return err
		}
		n -= take
	}
	if n != 0 {
		cc.broken = true
		return fmt.Errorf("readParts: %d body bytes left over after the caller's parts: %w", n, wire.StatusInvalid)
	}
	return nil
}

// readValue reads the next len(b) value bytes into b. A value of
// directReadMin bytes or more is read from the socket straight into b once
// the bytes already buffered are taken: through bufio, the tail of each
// large value (whatever was left under the buffer's size) would be read
// into the buffer with the bytes after it and copied out again.
func (cc *cconn) readValue(b []byte) error {
	if len(b) < directReadMin || cc.arena != nil {
		return cc.readFull(b)
	}
	if k := min(cc.br.Buffered(), len(b)); k > 0 {
		if err := cc.readFull(b[:k]); err != nil {
			return err
		}
		b = b[k:]
	}
	return cc.readFrom(cc.nc, b)
}
