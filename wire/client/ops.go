package client

import (
	"context"
	"fmt"

	"github.com/dfkv/dfkv/wire"
)

// Put stores value under key, replacing any previous value. value must be
// non-empty and at most MaxBlockBytes.
func (c *Client) Put(ctx context.Context, key, value []byte) error {
	k, err := c.keyOf(key)
	if err != nil {
		return err
	}
	if err := checkValue(value, c.opts.MaxBlockBytes); err != nil {
		return err
	}
	p := c.route(k)
	deadline := c.deadline(ctx) // one for both ways, RDMA and TCP
	if c.opts.RDMA != nil {
		var errs [1]error
		if c.rdmaPut(ctx, p, deadline, singleIdx, []wire.BlockKey{k}, errs[:], func(int) []byte { return value }) {
			return errs[0]
		}
	}
	return c.exchange(ctx, p, deadline, false, func(cc *cconn) error {
		if cc.lease != nil && len(value) <= len(cc.lease.staging) {
			var errs [1]error
			ks := [1]wire.BlockKey{k}
			if err := c.leasePut(cc, singleIdx, ks[:], errs[:], func(int) uint64 { return uint64(len(value)) },
				func(_ int, dst []byte) { copy(dst, value) }); err != nil {
				return err
			}
			return errs[0]
		}
		cc.wbuf = wire.AppendRequest(cc.wbuf, &wire.RequestHeader{Op: wire.OpPut, Key: k, BodyLen: uint64(len(value))})
		if err := cc.send(value); err != nil {
			return err
		}
		h, err := cc.readHeader()
		if err == nil {
			return cc.noBody(h, wire.OpPut)
		}
		if wire.StatusOf(err) == wire.StatusTooLarge {
			// Over the node's max_block_bytes, the node answers and
			// closes the connection; pooled, it would only fail the next
			// call. (An engine's TOO_LARGE keeps it open: one redial.)
			cc.broken = true
		}
		return err
	})
}

// Get reads the whole value of key into dst and returns its length. When
// the value is longer than dst, it returns ErrBufferTooSmall and the
// stored length (dst then holds the first len(dst) bytes).
func (c *Client) Get(ctx context.Context, key, dst []byte) (n int, stored uint64, err error) {
	if len(dst) == 0 {
		return 0, 0, fmt.Errorf("Get into an empty buffer; use GetAuto: %w", wire.StatusInvalid)
	}
	n, stored, err = c.GetRange(ctx, key, 0, uint64(len(dst)), dst)
	if err == nil && stored > uint64(len(dst)) {
		err = ErrBufferTooSmall
	}
	return n, stored, err
}

// GetRange reads length bytes at offset of key's value into dst, following
// the range contract: length 0 reads to the end, offset == stored length
// reads nothing successfully, offset past the end is INVALID, a length past
// the end is clamped. It returns the bytes read and the full stored length.
// dst must hold the bytes that will be read; a node answering with more
// than len(dst) is a protocol error.
func (c *Client) GetRange(ctx context.Context, key []byte, offset, length uint64, dst []byte) (n int, stored uint64, err error) {
	k, err := c.keyOf(key)
	if err != nil {
		return 0, 0, err
	}
	if length == 0 || length > uint64(len(dst)) {
		length = uint64(len(dst))
		if length == 0 {
			return 0, 0, fmt.Errorf("GetRange into an empty buffer: %w", wire.StatusInvalid)
		}
	}
	if c.opts.Local != nil {
		if n, stored, ok, err := c.opts.Local(k, offset, length, dst); ok {
			return n, stored, err
		}
	}
	p := c.route(k)
	deadline := c.deadline(ctx) // one for both ways, RDMA and TCP
	if n, stored, err, ok := c.rdmaGetRange(ctx, p, deadline, k, offset, length, dst); ok {
		return n, stored, err
	}
	err = c.exchange(ctx, p, deadline, true, func(cc *cconn) error {
		if cc.lease != nil {
			var res [1]GetResult
			ks := [1]wire.BlockKey{k}
			err := c.leaseGet(cc, 0, singleIdx, ks[:], res[:], func(int) uint64 { return offset }, func(int) uint64 { return length },
				func(cc *cconn, _ int, _ *GetResult, got uint64) error {
					n = int(got)
					return cc.readValue(dst[:got])
				})
			stored = res[0].Stored
			if err != nil {
				return err
			}
			return res[0].Err
		}
		cc.wbuf = wire.AppendRequest(cc.wbuf, &wire.RequestHeader{Op: wire.OpGet, Key: k, Offset: offset, Length: length})
		if err := cc.send(nil); err != nil {
			return err
		}
		h, err := cc.readHeaderFor(length)
		stored = h.Stored
		if err != nil {
			return err
		}
		if want, _ := wire.RangeLen(h.Stored, offset, length); h.BodyLen != want {
			cc.broken = true
			return fmt.Errorf("node answered %d bytes for a %d-byte read at offset %d of a %d-byte value, not %d: %w",
				h.BodyLen, length, offset, h.Stored, want, wire.StatusInvalid)
		}
		n = int(h.BodyLen)
		return cc.readValue(dst[:n])
	})
	return n, stored, err
}

// GetAuto reads the whole value of key into a new buffer of exactly its
// length.
func (c *Client) GetAuto(ctx context.Context, key []byte) ([]byte, error) {
	k, err := c.keyOf(key)
	if err != nil {
		return nil, err
	}
	var out []byte
	p := c.route(k)
	err = c.exchange(ctx, p, c.deadline(ctx), true, func(cc *cconn) error {
		cc.wbuf = wire.AppendRequest(cc.wbuf, &wire.RequestHeader{Op: wire.OpGet, Key: k})
		if err := cc.send(nil); err != nil {
			return err
		}
		h, err := cc.readHeader()
		if err != nil {
			return err
		}
		if h.BodyLen != h.Stored {
			cc.broken = true
			return fmt.Errorf("node answered %d bytes of a %d-byte value: %w", h.BodyLen, h.Stored, wire.StatusInvalid)
		}
		if h.BodyLen > c.opts.MaxBlockBytes {
			cc.broken = true // cheaper than reading what we refuse
			return fmt.Errorf("the %d-byte value exceeds this client's max_block_bytes %d: %w", h.Stored, c.opts.MaxBlockBytes, wire.StatusTooLarge)
		}
		out = make([]byte, h.BodyLen)
		return cc.readFull(out)
	})
	return out, err
}

// Exist reports the stored length of key; a miss is an error wrapping
// wire.StatusNotFound.
func (c *Client) Exist(ctx context.Context, key []byte) (stored uint64, err error) {
	k, err := c.keyOf(key)
	if err != nil {
		return 0, err
	}
	p := c.route(k)
	err = c.exchange(ctx, p, c.deadline(ctx), true, func(cc *cconn) error {
		cc.wbuf = wire.AppendRequest(cc.wbuf, &wire.RequestHeader{Op: wire.OpExist, Key: k})
		if err := cc.send(nil); err != nil {
			return err
		}
		h, err := cc.readHeader()
		stored = h.Stored
		if err != nil {
			return err
		}
		return cc.noBody(h, wire.OpExist)
	})
	return stored, err
}

// Remove deletes key; a missing key is an error wrapping wire.StatusNotFound.
func (c *Client) Remove(ctx context.Context, key []byte) error {
	k, err := c.keyOf(key)
	if err != nil {
		return err
	}
	p := c.route(k)
	return c.exchange(ctx, p, c.deadline(ctx), false, func(cc *cconn) error {
		cc.wbuf = wire.AppendRequest(cc.wbuf, &wire.RequestHeader{Op: wire.OpRemove, Key: k})
		if err := cc.send(nil); err != nil {
			return err
		}
		h, err := cc.readHeader()
		if err != nil {
			return err
		}
		return cc.noBody(h, wire.OpRemove)
	})
}

// Ping checks that the node at addr answers. addr need not be a member.
func (c *Client) Ping(ctx context.Context, addr string) error {
	p := c.peerFor(addr)
	return c.exchange(ctx, p, c.deadline(ctx), false, func(cc *cconn) error {
		cc.wbuf = wire.AppendRequest(cc.wbuf, &wire.RequestHeader{Op: wire.OpPing})
		if err := cc.send(nil); err != nil {
			return err
		}
		h, err := cc.readHeader()
		if err != nil {
			return err
		}
		return cc.noBody(h, wire.OpPing)
	})
}

// maxStatsBody bounds the STATS reply a client accepts.
const maxStatsBody = 16 << 20

// Stats returns the JSON statistics document of the node at addr.
func (c *Client) Stats(ctx context.Context, addr string) ([]byte, error) {
	p := c.peerFor(addr)
	var out []byte
	err := c.exchange(ctx, p, c.deadline(ctx), false, func(cc *cconn) error {
		cc.wbuf = wire.AppendRequest(cc.wbuf, &wire.RequestHeader{Op: wire.OpStats})
		if err := cc.send(nil); err != nil {
			return err
		}
		h, err := cc.readHeader()
		if err != nil {
			return err
		}
		if h.BodyLen > maxStatsBody {
			cc.broken = true
			return fmt.Errorf("STATS reply of %d bytes is over %d: %w", h.BodyLen, maxStatsBody, wire.StatusInvalid)
		}
		out = make([]byte, h.BodyLen)
		return cc.readFull(out)
	})
	return out, err
}

// peerFor returns the member peer at addr, or a transient peer for a
// non-member address (tools address nodes directly).
func (c *Client) peerFor(addr string) *peer {
	c.peerMu.Lock()
	p := c.peers[addr]
	c.peerMu.Unlock()
	if p != nil {
		return p
	}
	p = newPeer(addr, &c.opts)
	p.done = true // not pooled: close its connection after the call
	return p
}

// noBody checks an OK answer to an op that carries no body. A body there
// would be left on the connection and read as the next call's answer, so
// the connection is broken and the call fails.
func (cc *cconn) noBody(h wire.ResponseHeader, op wire.Op) error {
	if h.BodyLen == 0 {
		return nil
	}
	cc.broken = true
	return fmt.Errorf("node answered %s with a %d-byte body; it carries none: %w", op, h.BodyLen, wire.StatusInvalid)
}
