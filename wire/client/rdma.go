package client

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/dfkv/dfkv/rdma"
	"github.com/dfkv/dfkv/wire"
)

// rdmaRetry is how long a node whose RDMA connection failed is served
// over TCP before the client dials RDMA again.
const rdmaRetry = 30 * time.Second

// rdmaPeer is a node's pool of RDMA connections (Options.RDMA).
type rdmaPeer struct {
	mu      sync.Mutex
	idle    []*rdma.Conn
	retryAt time.Time
	done    bool
}

// getRDMA returns an RDMA connection to p, or nil: RDMA is off, the node
// failed it lately, or the node is backed off or stalled over TCP (the
// call goes the TCP way, which answers for such a node at once).
func (c *Client) getRDMA(ctx context.Context, p *peer) *rdma.Conn {
	if c.opts.RDMA == nil || p == nil {
		return nil
	}
	now := time.Now()
	if _, stalled := p.stalled(now); stalled || p.brk.refuses(now) {
		return nil
	}
	r := &p.rdma
	r.mu.Lock()
	if r.done || now.Before(r.retryAt) {
		r.mu.Unlock()
		return nil
	}
	if n := len(r.idle); n > 0 {
		rc := r.idle[n-1]
		r.idle = r.idle[:n-1]
		r.mu.Unlock()
		return rc
	}
	r.mu.Unlock()
	// The dial and bootstrap end with the caller's context (its own
	// deadline included), or at the transport's DialTimeout, whose expiry
	// is a failure of RDMA to the node.
	rc, err := rdma.DialContext(ctx, p.addr, *c.opts.RDMA)
	if err != nil {
		c.rdmaFailed(p, nil, err)
		return nil
	}
	return rc
}

// putRDMA returns a healthy connection to the pool.
func (c *Client) putRDMA(p *peer, rc *rdma.Conn) {
	r := &p.rdma
	r.mu.Lock()
	if !r.done && len(r.idle) < c.opts.PoolSize && !rc.Broken() {
		r.idle = append(r.idle, rc)
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()
	_ = rc.Close()
}

// rdmaFailed closes a broken connection (rc may be nil: the dial failed)
// and the idle ones, which most likely broke with it, and serves the
// node over TCP for rdmaRetry.
func (c *Client) rdmaFailed(p *peer, rc *rdma.Conn, err error) {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		// The caller gave up (or had, before anything was sent); that
		// says nothing about RDMA to the node. The connection goes back
		// unless the call broke it, and the call goes on to TCP, which
		// answers the cancellation.
		if rc != nil {
			c.putRDMA(p, rc)
		}
		return
	}
	if rc != nil {
		_ = rc.Close()
	}
	r := &p.rdma
	r.mu.Lock()
	first := !time.Now().Before(r.retryAt)
	r.retryAt = time.Now().Add(rdmaRetry)
	idle := r.idle
	r.idle = nil
	r.mu.Unlock()
	for _, ic := range idle {
		_ = ic.Close()
	}
	if first {
		c.opts.Logger.Warn("client: RDMA to a node failed; using TCP for it", "node", p.addr, "retry_in", rdmaRetry.String(), "err", err)
	}
}

// closeRDMA ends the pool (Client.Close).
func (r *rdmaPeer) close() {
	r.mu.Lock()
	idle := r.idle
	r.idle, r.done = nil, true
	r.mu.Unlock()
	for _, rc := range idle {
		_ = rc.Close()
	}
}

// rdmaGet serves a group of whole-value reads (GetBatch) whose items all
// have destination buffers over RDMA; false: the group goes over TCP
// (RDMA off, failed, or an item without a buffer). A value longer than
// its buffer fills it and fails with ErrBufferTooSmall, as over TCP. The
// items it returns (rest, restKeys) are values larger than one RDMA
// transfer, which the caller reads over TCP.
func (c *Client) rdmaGet(ctx context.Context, p *peer, deadline time.Time, idx []int, ks []wire.BlockKey, res []GetResult, dstOf func(i int) []byte) (rest []int, restKeys []wire.BlockKey, ok bool) {
	if c.opts.RDMA == nil {
		return nil, nil, false
	}
	items := make([]rdma.GetItem, len(idx))
	dst := make([][]byte, len(idx))
	for n, i := range idx {
		if dst[n] = dstOf(i); len(dst[n]) == 0 {
			return nil, nil, false
		}
		items[n] = rdma.GetItem{Key: ks[n], Length: uint64(len(dst[n]))}
	}
	rc := c.getRDMA(ctx, p)
	if rc == nil {
		return nil, nil, false
	}
	out := make([]rdma.GetResult, len(idx))
	if err := rc.GetBatchCtx(ctx, deadline, items, dst, out); err != nil {
		c.rdmaFailed(p, rc, err)
		return nil, nil, false
	}
	c.putRDMA(p, rc)
	for n, i := range idx {
		if errors.Is(out[n].Err, rdma.ErrTransferTooBig) {
			rest, restKeys = append(rest, i), append(restKeys, ks[n])
			continue
		}
		r := GetResult{Stored: out[n].Stored, Err: out[n].Err}
		if r.Err == nil {
			r.Data = dst[n][:out[n].N]
			if r.Stored > uint64(len(dst[n])) {
				r.Err = ErrBufferTooSmall
			}
		}
		res[i] = r
	}
	return rest, restKeys, true
}

// rdmaGetRange is GetRange over RDMA; ok false: it goes over TCP.
func (c *Client) rdmaGetRange(ctx context.Context, p *peer, deadline time.Time, k wire.BlockKey, offset, length uint64, dst []byte) (n int, stored uint64, err error, ok bool) {
	if c.opts.RDMA == nil {
		return 0, 0, nil, false
	}
	rc := c.getRDMA(ctx, p)
	if rc == nil {
		return 0, 0, nil, false
	}
	var r [1]rdma.GetResult
	if terr := rc.GetBatchCtx(ctx, deadline, []rdma.GetItem{{Key: k, Offset: offset, Length: length}}, [][]byte{dst}, r[:]); terr != nil {
		c.rdmaFailed(p, rc, terr)
		return 0, 0, nil, false
	}
	c.putRDMA(p, rc)
	if errors.Is(r[0].Err, rdma.ErrTransferTooBig) {
		return 0, 0, nil, false // larger than one transfer: TCP carries it
	}
	return r[0].N, r[0].Stored, r[0].Err, true
}

// rdmaPut stores a group of putBatch over RDMA; false: the group goes
// over TCP.
func (c *Client) rdmaPut(ctx context.Context, p *peer, deadline time.Time, idx []int, ks []wire.BlockKey, errs []error, value func(i int) []byte) bool {
	if c.opts.RDMA == nil {
		return false
	}
	vals := make([][]byte, len(idx))
	for n, i := range idx {
		if vals[n] = value(i); vals[n] == nil {
			return false
		}
	}
	rc := c.getRDMA(ctx, p)
	if rc == nil {
		return false
	}
	for _, v := range vals {
		if uint64(len(v)) > rc.MaxPutBytes() {
			c.putRDMA(p, rc)
			return false // larger than one transfer: TCP carries the group
		}
	}
	out := make([]error, len(idx))
	if err := rc.PutBatchCtx(ctx, deadline, ks, vals, out); err != nil {
		c.rdmaFailed(p, rc, err)
		return false
	}
	c.putRDMA(p, rc)
	for n, i := range idx {
		errs[i] = out[n]
	}
	return true
}
