package client

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/dfkv/dfkv/wire"
)

// GetResult is one item of GetBatch.
type GetResult struct {
	Data   []byte // the bytes read: a prefix of the caller's dst, or a new buffer
	Stored uint64 // full stored length
	Err    error
}

// ExistResult is one item of ExistBatch.
type ExistResult struct {
	Stored uint64
	Err    error // nil on a hit; wraps wire.StatusNotFound on a miss
}

// group is the items of one batch that one node owns, in caller order.
type group struct {
	p    *peer
	idx  []int
	keys []wire.BlockKey
}

// split maps keys and groups them by owning node. Items whose key is
// invalid get their error in errs and are left out.
func (c *Client) split(keys [][]byte, errs func(i int, err error)) []*group {
	byPeer := make(map[*peer]*group)
	var order []*group
	for i, key := range keys {
		k, err := c.keyOf(key)
		if err != nil {
			errs(i, err)
			continue
		}
		p := c.route(k)
		if p == nil {
			errs(i, errNoMembers)
			continue
		}
		g := byPeer[p]
		if g == nil {
			g = &group{p: p}
			byPeer[p] = g
			order = append(order, g)
		}
		g.idx = append(g.idx, i)
		g.keys = append(g.keys, k)
	}
	return order
}

// fanOut runs fn for every frame-sized chunk of every group, at most
// BatchConcurrency at once. fn gets the chunk's positions in the group.
// A group of several frames goes one frame after another when inOrder
// and it repeats a key (a node applies one frame's items in order, but
// frames sent at once land in any order, so the last value would not
// reliably win), and starts with one frame alone when its node has a
// failure on record (its breaker is not closed: it lets one call through
// as the trial and fails the others fast until the trial's verdict).
func (c *Client) fanOut(groups []*group, inOrder bool, fn func(g *group, lo, hi int)) {
	sem := make(chan struct{}, c.opts.BatchConcurrency)
	var wg sync.WaitGroup
	step := c.opts.MaxBatchItems
	chunk := func(g *group, lo int) {
		sem <- struct{}{}
		fn(g, lo, min(lo+step, len(g.idx)))
		<-sem
	}
	spawn := func(g *group, lo int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			chunk(g, lo)
		}()
	}
	for _, g := range groups {
		switch {
		case len(g.idx) <= step:
			spawn(g, 0)
		case inOrder && wire.HasDuplicate(g.keys):
			wg.Add(1)
			go func() {
				defer wg.Done()
				for lo := 0; lo < len(g.idx); lo += step {
					chunk(g, lo)
				}
			}()
		case !g.p.brk.closed():
			wg.Add(1)
			go func() {
				defer wg.Done()
				chunk(g, 0)
				for lo := step; lo < len(g.idx); lo += step {
					spawn(g, lo)
				}
			}()
		default:
			for lo := 0; lo < len(g.idx); lo += step {
				spawn(g, lo)
			}
		}
	}
	wg.Wait()
}

// dropFailed takes the items that already failed locally out of groups,
// so no request carries them.
func dropFailed(groups []*group, failed func(i int) bool) {
	for _, g := range groups {
		j := 0
		for n, i := range g.idx {
			if !failed(i) {
				g.idx[j], g.keys[j] = i, g.keys[n]
				j++
			}
		}
		g.idx, g.keys = g.idx[:j], g.keys[:j]
	}
}

// readPutRecords reads a BATCH_PUT answer: one status byte per item of
// idx, in order, into errs.
func (cc *cconn) readPutRecords(idx []int, errs []error) error {
	if _, err := cc.readRecordsHeader(len(idx)); err != nil {
		return err
	}
	var rec [1]byte
	for _, i := range idx {
		if err := cc.readFull(rec[:]); err != nil {
			return err
		}
		errs[i] = statusErr(wire.Status(rec[0]))
	}
	return nil
}

// PutBatch stores values[i] under keys[i] and returns one error per item
// (nil for success). Items are sent to their owning nodes in parallel.
func (c *Client) PutBatch(ctx context.Context, keys, values [][]byte) []error {
	errs := make([]error, len(keys))
	if len(values) != len(keys) {
		for i := range errs {
			errs[i] = fmt.Errorf("PutBatch: %d keys but %d values: %w", len(keys), len(values), wire.StatusInvalid)
		}
		return errs
	}
	for i, v := range values {
		if err := checkValue(v, c.opts.MaxBlockBytes); err != nil {
			errs[i] = err
		}
	}
	return c.putBatch(ctx, keys, errs, func(i int) uint64 { return uint64(len(values[i])) },
		func(cc *cconn, idx []int) error {
			for _, i := range idx {
				if err := cc.send(values[i]); err != nil {
					return err
				}
			}
			return nil
		},
		func(i int, dst []byte) { copy(dst, values[i]) },
		func(i int) []byte { return values[i] })
}

// putBatch sends the items of keys not yet failed in errs as BATCH_PUT
// frames to their nodes in parallel and fills errs. size(i) is item i's
// value length; send writes wbuf (the frame's prefix and item table) and
// then the values of idx, in order.
func (c *Client) putBatch(ctx context.Context, keys [][]byte, errs []error, size func(i int) uint64,
	send func(cc *cconn, idx []int) error, fill func(i int, dst []byte), value func(i int) []byte) []error {
	groups := c.split(keys, func(i int, err error) { errs[i] = err })
	dropFailed(groups, func(i int) bool { return errs[i] != nil })
	deadline := c.deadline(ctx)
	c.fanOut(groups, true, func(g *group, lo, hi int) {
		idx, ks := g.idx[lo:hi], g.keys[lo:hi]
		if len(idx) == 0 {
			return
		}
		if value != nil && c.rdmaPut(ctx, g.p, deadline, idx, ks, errs, value) {
			return
		}
		var body uint64
		for _, i := range idx {
			body += size(i)
		}
		err := c.exchange(ctx, g.p, deadline, false, func(cc *cconn) error {
			if cc.lease != nil && fitsStaging(cc, idx, size) {
				return c.leasePut(cc, idx, ks, errs, size, fill)
			}
			cc.wbuf = wire.AppendRequest(cc.wbuf, &wire.RequestHeader{
				Op: wire.OpBatchPut, Length: uint64(len(idx)),
				BodyLen: uint64(len(idx))*wire.BatchPutItemLen + body,
			})
			for n, i := range idx {
				cc.wbuf = wire.AppendPutItem(cc.wbuf, ks[n], size(i))
			}
			if err := send(cc, idx); err != nil {
				return err
			}
			return cc.readPutRecords(idx, errs)
		})
		if err != nil {
			for _, i := range idx {
				errs[i] = err
			}
		}
	})
	return errs
}

// GetBatch reads keys[i] into dsts[i] (whole values). A nil dsts[i] (or a
// nil dsts) allocates a buffer of the stored length. A value longer than
// its dst fails that item with ErrBufferTooSmall and its stored length.
func (c *Client) GetBatch(ctx context.Context, keys [][]byte, dsts [][]byte) []GetResult {
	res := make([]GetResult, len(keys))
	if dsts != nil && len(dsts) != len(keys) {
		for i := range res {
			res[i].Err = fmt.Errorf("GetBatch: %d keys but %d buffers: %w", len(keys), len(dsts), wire.StatusInvalid)
		}
		return res
	}
	dst := func(i int) []byte {
		if dsts == nil {
			return nil
		}
		return dsts[i]
	}
	return c.getBatch(ctx, keys, res, atStart, func(i int) uint64 { return c.askFor(dst(i)) }, dst,
		func(cc *cconn, i int, r *GetResult, n uint64) error {
			d := dst(i)
			switch {
			case d == nil && n > c.opts.MaxBlockBytes:
				// Longer than this client accepts (it asked for one
				// byte more, to tell): skipped, the stream stays in step.
				if err := cc.discard(n); err != nil {
					return err
				}
				r.Err = fmt.Errorf("BATCH_GET: the %d-byte value exceeds this client's max_block_bytes %d: %w", r.Stored, c.opts.MaxBlockBytes, wire.StatusTooLarge)
				return nil
			case d == nil:
				d = make([]byte, n)
			case n > uint64(len(d)):
				if err := cc.readFull(d); err != nil {
					return err
				}
				if err := cc.discard(n - uint64(len(d))); err != nil {
					return err
				}
				r.Data, r.Err = d, ErrBufferTooSmall
				return nil
			}
			if err := cc.readValue(d[:n]); err != nil {
				return err
			}
			r.Data = d[:n]
			return nil
		})
}

// atStart is getBatch's offset for calls that read values from their
// first byte.
func atStart(int) uint64 { return 0 }

// getBatch sends the items of keys not yet failed in res as BATCH_GET
// frames to their nodes in parallel, asking ask(i) bytes of item i from
// its byte at(i), and checks every record against the range contract;
// take reads the n value bytes of a record that carries some (status OK)
// into r's destination, and may set r.Err. An offset is per item because
// a ranged caller (a layer of each of many blocks) reads a different
// place in each value.
func (c *Client) getBatch(ctx context.Context, keys [][]byte, res []GetResult, at, ask func(i int) uint64, direct func(i int) []byte,
	take func(cc *cconn, i int, r *GetResult, n uint64) error) []GetResult {
	groups := c.split(keys, func(i int, err error) { res[i].Err = err })
	dropFailed(groups, func(i int) bool { return res[i].Err != nil })
	deadline := c.deadline(ctx)
	c.fanOut(groups, false, func(g *group, lo, hi int) {
		idx, ks := g.idx[lo:hi], g.keys[lo:hi]
		if direct != nil && c.opts.Local != nil {
			idx, ks = c.localGet(idx, ks, res, at, ask, direct)
		}
		if len(idx) == 0 {
			return
		}
		if direct != nil {
			if rest, restKeys, ok := c.rdmaGet(ctx, g.p, deadline, idx, ks, res, direct); ok {
				if idx, ks = rest, restKeys; len(idx) == 0 {
					return
				}
			}
		}
		err := c.exchange(ctx, g.p, deadline, true, func(cc *cconn) error {
			if cc.lease != nil {
				return c.leaseGet(cc, 0, idx, ks, res, at, ask, take)
			}
			cc.wbuf = wire.AppendRequest(cc.wbuf, &wire.RequestHeader{
				Op: wire.OpBatchGet, Length: uint64(len(idx)), BodyLen: uint64(len(idx)) * wire.BatchGetItemLen,
			})
			for n, i := range idx {
				cc.wbuf = wire.AppendGetItem(cc.wbuf, ks[n], at(i), ask(i))
			}
			if err := cc.send(nil); err != nil {
				return err
			}
			if _, err := cc.readRecordsHeaderFor(len(idx), ask(idx[0])); err != nil {
				return err
			}
			var rec [wire.BatchGetRecordLen]byte
			for _, i := range idx {
				asked := ask(i)
				if err := cc.readRecordFor(rec[:], asked); err != nil {
					return err
				}
				st, stored, n := wire.DecodeGetRecord(rec[:])
				r := &res[i]
				r.Stored = stored
				if st != wire.StatusOK {
					r.Err = statusErr(st)
					if n != 0 {
						cc.broken = true
						return fmt.Errorf("BATCH_GET record with status %s carries %d bytes: %w", st, n, wire.StatusInvalid)
					}
					continue
				}
				// An OK record for an offset past the value breaks the
				// contract as surely as a wrong length: RangeLen's ok.
				if want, ok := wire.RangeLen(stored, at(i), asked); !ok || n != want {
					cc.broken = true
					return fmt.Errorf("BATCH_GET record of %d bytes for %d bytes at offset %d of a %d-byte value (max_block_bytes %d): %w", n, asked, at(i), stored, c.opts.MaxBlockBytes, wire.StatusInvalid)
				}
				if err := take(cc, i, r, n); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			for _, i := range idx {
				res[i] = GetResult{Err: err}
			}
		}
	})
	return res
}

// ExistBatch looks up every key and returns one result per item.
func (c *Client) ExistBatch(ctx context.Context, keys [][]byte) []ExistResult {
	return c.existBatch(ctx, keys, 0)
}

// ExistBatchPinned is ExistBatch that also asks each node to keep the
// values it finds where they are (RAM, or disk) until a GET of the key
// (from any client) or its lease time passes (server.lease_ms), so a
// prefix found is still there when the engine loads it. Values larger
// than one disk extent are not pinned.
func (c *Client) ExistBatchPinned(ctx context.Context, keys [][]byte) []ExistResult {
	return c.existBatch(ctx, keys, wire.ExistFlagPin)
}

func (c *Client) existBatch(ctx context.Context, keys [][]byte, flags uint64) []ExistResult {
	res := make([]ExistResult, len(keys))
	groups := c.split(keys, func(i int, err error) { res[i].Err = err })
	deadline := c.deadline(ctx)
	c.fanOut(groups, false, func(g *group, lo, hi int) {
		idx, ks := g.idx[lo:hi], g.keys[lo:hi]
		record := func(n int, st wire.Status, stored uint64) {
			res[idx[n]] = ExistResult{Stored: stored, Err: statusErr(st)}
		}
		err := c.keyBatch(ctx, g.p, deadline, wire.OpBatchExist, flags, ks, record)
		if flags != 0 && wire.StatusOf(err) == wire.StatusInvalid {
			// A node older than pins refuses the flag (INVALID, for
			// the frame): it is asked again without, and pins nothing.
			err = c.keyBatch(ctx, g.p, deadline, wire.OpBatchExist, 0, ks, record)
		}
		if err != nil {
			for _, i := range idx {
				res[i] = ExistResult{Err: err}
			}
		}
	})
	return res
}

// ExistPrefix returns how many consecutive keys from the first are
// stored: the "how long a prefix is cached" question every engine asks.
// It looks up all keys in parallel across their owners and cuts the answer
// at the first miss or error. It is also the lookup for block-prefix chain
// keys: given the keys of wire.Chain.ObjectKeys it returns the number of
// leading blocks stored. The tail's key, last, counts when a tail of the
// same parent is stored, possibly for other tokens: compare the digest
// stored with it before using it.
func (c *Client) ExistPrefix(ctx context.Context, keys [][]byte) (int, error) {
	return prefixOf(c.ExistBatch(ctx, keys))
}

// ExistPrefixPinned is ExistPrefix with the pins of ExistBatchPinned.
func (c *Client) ExistPrefixPinned(ctx context.Context, keys [][]byte) (int, error) {
	return prefixOf(c.ExistBatchPinned(ctx, keys))
}

// prefixOf cuts lookup results at the first miss or error.
func prefixOf(res []ExistResult) (int, error) {
	for i, r := range res {
		if r.Err != nil {
			if wire.StatusOf(r.Err) == wire.StatusNotFound {
				return i, nil
			}
			return i, r.Err
		}
	}
	return len(res), nil
}

// RemoveBatch removes every key and returns one error per item.
func (c *Client) RemoveBatch(ctx context.Context, keys [][]byte) []error {
	errs := make([]error, len(keys))
	groups := c.split(keys, func(i int, err error) { errs[i] = err })
	deadline := c.deadline(ctx)
	c.fanOut(groups, true, func(g *group, lo, hi int) {
		idx, ks := g.idx[lo:hi], g.keys[lo:hi]
		err := c.keyBatch(ctx, g.p, deadline, wire.OpBatchRemove, 0, ks, func(n int, st wire.Status, _ uint64) {
			errs[idx[n]] = statusErr(st)
		})
		if err != nil {
			for _, i := range idx {
				errs[i] = err
			}
		}
	})
	return errs
}

// keyBatch sends one BATCH_EXIST or BATCH_REMOVE frame and reports each
// record through fn.
func (c *Client) keyBatch(ctx context.Context, p *peer, deadline time.Time, op wire.Op, flags uint64, ks []wire.BlockKey, fn func(n int, st wire.Status, stored uint64)) error {
	return c.exchange(ctx, p, deadline, op == wire.OpBatchExist, func(cc *cconn) error {
		cc.wbuf = wire.AppendRequest(cc.wbuf, &wire.RequestHeader{Op: op, Offset: flags, Length: uint64(len(ks)), BodyLen: uint64(len(ks)) * wire.BatchKeyItemLen})
		for _, k := range ks {
			cc.wbuf = wire.AppendKeyItem(cc.wbuf, k)
		}
		if err := cc.send(nil); err != nil {
			return err
		}
		if _, err := cc.readRecordsHeader(len(ks)); err != nil {
			return err
		}
		recLen := wire.BatchStatusRecLen
		if op == wire.OpBatchExist {
			recLen = wire.BatchExistRecLen
		}
		var rec [wire.BatchExistRecLen]byte
		for n := range ks {
			if err := cc.readFull(rec[:recLen]); err != nil {
				return err
			}
			if op == wire.OpBatchExist {
				st, stored := wire.DecodeExistRecord(rec[:])
				fn(n, st, stored)
			} else {
				fn(n, wire.Status(rec[0]), 0)
			}
		}
		return nil
	})
}

// readRecordsHeader reads a batch response prefix and checks that it
// announces n records.
func (cc *cconn) readRecordsHeader(n int) (wire.ResponseHeader, error) {
	return cc.readRecordsHeaderFor(n, 0)
}

// readRecordsHeaderFor is readRecordsHeader for a BATCH_GET whose first
// record carries about expect value bytes (readHeaderFor: a large one is
// then read from the socket into the caller's buffer, not through bufio).
func (cc *cconn) readRecordsHeaderFor(n int, expect uint64) (wire.ResponseHeader, error) {
	h, err := cc.readHeaderFor(expect)
	if err != nil {
		// A batch reply's own status is OK; any other is the node
		// refusing the whole frame, after which it closes the connection.
		cc.broken = true
		return h, err
	}
	if h.Stored != uint64(n) || h.BodyLen != 0 {
		cc.broken = true
		return h, fmt.Errorf("batch reply announces %d records (body %d), want %d: %w", h.Stored, h.BodyLen, n, wire.StatusInvalid)
	}
	return h, nil
}

// readRecordFor reads a batch record of fixed size into b, straight from
// the socket when nothing is buffered and its value is expected to be
// large (expect bytes), so the value that follows is not pulled into the
// bufio buffer and copied out again.
func (cc *cconn) readRecordFor(b []byte, expect uint64) error {
	if expect < directReadMin || cc.br.Buffered() != 0 {
		return cc.readFull(b)
	}
	if _, err := io.ReadFull(cc.nc, b); err != nil {
		cc.broken = true
		return err
	}
	cc.read(len(b))
	return nil
}

// statusErr is nil for OK and the bare status otherwise.
func statusErr(s wire.Status) error {
	if s == wire.StatusOK {
		return nil
	}
	if !s.Known() {
		return fmt.Errorf("node sent unknown status %d: %w", uint8(s), wire.StatusInvalid)
	}
	return s
}

// askFor is the length a BATCH_GET item asks for into dst: one byte more
// than dst holds, or than MaxBlockBytes for a nil dst (which gets a new
// buffer), so a value too long for either is told without reading all of
// it. The answer is bounded by what the caller can take, whatever the
// node's own limit.
func (c *Client) askFor(dst []byte) uint64 {
	if dst == nil {
		return c.opts.MaxBlockBytes + 1
	}
	return uint64(len(dst)) + 1
}

// localGet reads the items an embedded store's node holds in RAM with
// Options.Local, into their caller buffers, and returns the others (in
// order; the same slices when it read none), which go over the connection.
func (c *Client) localGet(idx []int, ks []wire.BlockKey, res []GetResult, at, ask func(int) uint64, direct func(int) []byte) ([]int, []wire.BlockKey) {
	var restIdx []int
	var restKs []wire.BlockKey
	for j, i := range idx {
		d := direct(i)
		var n int
		var stored uint64
		var ok bool
		var err error
		if d != nil {
			n, stored, ok, err = c.opts.Local(ks[j], at(i), min(ask(i), uint64(len(d))), d)
		}
		if !ok {
			if restIdx != nil {
				restIdx, restKs = append(restIdx, i), append(restKs, ks[j])
			}
			continue
		}
		if restIdx == nil { // the first read here: the items before it were left
			restIdx, restKs = append(make([]int, 0, len(idx)), idx[:j]...), append(make([]wire.BlockKey, 0, len(idx)), ks[:j]...)
		}
		res[i].Stored, res[i].Err = stored, err
		if err == nil {
			res[i].Data = d[:n]
			if stored > at(i)+uint64(n) && uint64(n) == uint64(len(d)) {
				res[i].Err = ErrBufferTooSmall // as over the connection: d holds the first bytes
			}
		}
	}
	if restIdx == nil {
		return idx, ks
	}
	return restIdx, restKs
}
