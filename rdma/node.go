package rdma

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/engine/iobuf"
	"github.com/dfkv/dfkv/engine/lease"
	"github.com/dfkv/dfkv/wire"
)

// Arena is a RAM tier whose arena peers may READ (ramtier.Tier): it lends
// resident values in place, and says where lent bytes lie in its memory.
type Arena interface {
	engine.LeaseLender
	// ArenaMem is the arena: one mapping with a stable address,
	// registered once for the node's life.
	ArenaMem() []byte
	// ArenaOffset is where b, bytes Lend returned, begins in the arena;
	// false for bytes outside it.
	ArenaOffset(b []byte) (uint64, bool)
}

// NodeOptions configure NewNode.
type NodeOptions struct {
	// Provider is the verbs library; nil: DefaultProvider (libibverbs in
	// a build with -tags ibverbs).
	Provider Provider
	// Device names the RDMA device; "": the first with an ACTIVE port.
	Device string
	// Arena is the RAM tier (nil: nothing is leased; every LEASE_GET item
	// comes back inline on the TCP connection).
	Arena Arena
	// Engine serves what is not leased (inline reads) and stores
	// LEASE_PUT's values. Required.
	Engine engine.StoreEngine
	// LeaseTTL is how long a lease lives unless released (0: 2 s);
	// LeaseMax how many may be live at once (0: 65536).
	LeaseTTL time.Duration
	LeaseMax int
	// StagingBytes is each connection's staging region, the most value
	// bytes one LEASE_PUT carries (0: 64 MiB).
	StagingBytes uint64
	// MaxBlockBytes bounds a value (0: 64 MiB); MaxBatchItems the items
	// of one frame (0: 4096).
	MaxBlockBytes uint64
	MaxBatchItems int
	// BootstrapTimeout bounds the bootstrap, the arrival of a request's
	// body once its header came, and the taking of an answer (0: 30 s).
	BootstrapTimeout time.Duration
	// Logger receives connection errors; nil discards them.
	Logger *slog.Logger
	// Now is the lease clock (nil: time.Now).
	Now func() time.Time
}

func (o *NodeOptions) defaults() {
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = 2 * time.Second
	}
	if o.LeaseMax <= 0 {
		o.LeaseMax = 65536
	}
	if o.StagingBytes == 0 {
		o.StagingBytes = 64 << 20
	}
	if o.MaxBlockBytes == 0 {
		o.MaxBlockBytes = 64 << 20
	}
	if o.MaxBatchItems <= 0 {
		o.MaxBatchItems = 4096
	}
	if o.BootstrapTimeout <= 0 {
		o.BootstrapTimeout = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Node is a cache node's side of the RDMA transport: it accepts TCP
// connections, bootstraps a queue pair with each, and serves the lease
// ops on them while clients READ leased values out of the arena and
// WRITE values into their staging regions. The arena and the lease-word
// region are registered once, on one PD all connections share.
type Node struct {
	opts     NodeOptions
	ln       net.Listener
	instance uint64
	dev      Device
	pd       PD
	arenaMR  MR // nil without an arena
	words    []byte
	wordsMR  MR
	leases   *lease.Table // nil without an arena
	owners   atomic.Uint64

	mu     sync.Mutex
	conns  map[*nodeConn]struct{}
	closed bool
	wg     sync.WaitGroup

	connEnded func() // tests: called after a connection's teardown
}

// NewNode opens the device, registers the arena and the lease words,
// and makes the lease table. Serve then accepts on ln; a node whose
// connections come from elsewhere (ServeConn) passes a nil ln.
func NewNode(ln net.Listener, opts NodeOptions) (_ *Node, err error) {
	opts.defaults()
	if opts.Engine == nil {
		return nil, errors.New("rdma node: no engine")
	}
	if opts.Provider == nil {
		if opts.Provider, err = DefaultProvider(); err != nil {
			return nil, fmt.Errorf("rdma node: %w", err)
		}
	}
	n := &Node{opts: opts, ln: ln, conns: map[*nodeConn]struct{}{}}
	defer func() {
		if err != nil {
			n.release()
		}
	}()
	var b [8]byte
	_, _ = rand.Read(b[:])
	n.instance = binary.LittleEndian.Uint64(b[:]) | 1
	if n.dev, err = opts.Provider.Open(opts.Device); err != nil {
		return nil, fmt.Errorf("rdma node: %w", err)
	}
	if len(n.dev.Name()) > maxDeviceName {
		return nil, fmt.Errorf("rdma node: device name %q is longer than the %d bytes the bootstrap frame carries; give it a shorter name (rdma dev set %s name SHORT)", n.dev.Name(), maxDeviceName, n.dev.Name())
	}
	if n.pd, err = n.dev.AllocPD(); err != nil {
		return nil, fmt.Errorf("rdma node: protection domain: %w", err)
	}
	if n.words, err = mapMem(uint64(opts.LeaseMax) * 8); err != nil {
		return nil, err
	}
	if n.wordsMR, err = n.pd.Register(n.words, AccessRemoteRead); err != nil {
		return nil, fmt.Errorf("rdma node: registering the lease words: %w", err)
	}
	if opts.Arena != nil && len(opts.Arena.ArenaMem()) > 0 {
		if n.arenaMR, err = n.pd.Register(opts.Arena.ArenaMem(), AccessRemoteRead); err != nil {
			return nil, fmt.Errorf("rdma node: registering the %d-byte arena: %w", len(opts.Arena.ArenaMem()), err)
		}
		n.leases, err = lease.New(lease.Options{Lender: opts.Arena, Capacity: opts.LeaseMax, TTL: opts.LeaseTTL, Words: n.words, Now: opts.Now,
			OwnerMax: max(1, opts.LeaseMax/lease.ConnShare), OwnerBytes: uint64(len(opts.Arena.ArenaMem())) / lease.ConnShare})
		if err != nil {
			return nil, fmt.Errorf("rdma node: %w", err)
		}
	}
	return n, nil
}

// Serve accepts connections until Close (then it returns nil) or until
// the listener fails.
func (n *Node) Serve() error {
	if n.ln == nil {
		return errors.New("rdma node: Serve without a listener; its connections come through ServeConn")
	}
	for {
		nc, err := n.ln.Accept()
		if err != nil {
			n.mu.Lock()
			closed := n.closed
			n.mu.Unlock()
			if closed {
				return nil
			}
			return fmt.Errorf("rdma node: accept: %w", err)
		}
		if !n.start(nc, bufio.NewReaderSize(nc, 64<<10), true) {
			return nil
		}
	}
}

// ServeConn serves one connection whose bootstrap frame is still to be
// read from br (the cache node's data port took the connection and saw
// the lease epoch in its first byte), until it ends. It returns at once,
// closing nc, after Close.
func (n *Node) ServeConn(nc net.Conn, br *bufio.Reader) { n.start(nc, br, false) }

// start registers a connection and serves it, on its own goroutine when
// async; false after Close.
func (n *Node) start(nc net.Conn, br *bufio.Reader, async bool) bool {
	c := &nodeConn{n: n, nc: nc, br: br}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		nc.Close()
		return false
	}
	n.conns[c] = struct{}{}
	n.wg.Add(1)
	n.mu.Unlock()
	if async {
		go c.serve()
	} else {
		c.serve()
	}
	return true
}

// Close stops accepting, ends every connection (its QP first, so no
// peer touches memory any more, then its leases), ends the remaining
// leases and deregisters the arena and the words. The caller closes the
// arena's tier afterwards.
func (n *Node) Close() error {
	n.mu.Lock()
	n.closed = true
	for c := range n.conns {
		c.nc.Close()
	}
	n.mu.Unlock()
	var err error
	if n.ln != nil {
		err = n.ln.Close()
	}
	n.wg.Wait()
	n.release()
	return err
}

func (n *Node) release() {
	if n.arenaMR != nil {
		_ = n.arenaMR.Deregister()
		n.arenaMR = nil
	}
	if n.leases != nil {
		n.leases.Close()
	}
	if n.wordsMR != nil {
		_ = n.wordsMR.Deregister()
		n.wordsMR = nil
	}
	unmapMem(n.words)
	n.words = nil
	if n.pd != nil {
		_ = n.pd.Close()
		n.pd = nil
	}
	if n.dev != nil {
		_ = n.dev.Close()
		n.dev = nil
	}
}

// NodeStats are the transport's numbers.
type NodeStats struct {
	Conns  int         `json:"conns"`
	Leases lease.Stats `json:"leases"`
}

// Stats returns the transport's numbers.
func (n *Node) Stats() NodeStats {
	n.mu.Lock()
	st := NodeStats{Conns: len(n.conns)}
	n.mu.Unlock()
	if n.leases != nil {
		st.Leases = n.leases.Stats()
	}
	return st
}

// nodeConn is one client's connection: its TCP control stream, its QP
// (which only answers the client's READs and WRITEs: the node posts
// nothing) and its staging region.
type nodeConn struct {
	n       *Node
	nc      net.Conn
	br      *bufio.Reader
	wbuf    []byte
	qp      QP
	staging []byte
	stageMR MR
	owner   uint64
	body    []byte
	keys    []wire.BlockKey
	vals    [][]byte
	errs    []error
	idx     []int
}

func (c *nodeConn) serve() {
	n := c.n
	defer func() {
		c.teardown()
		n.mu.Lock()
		delete(n.conns, c)
		n.mu.Unlock()
		n.wg.Done()
		if n.connEnded != nil {
			n.connEnded()
		}
	}()
	if err := c.bootstrap(); err != nil {
		if !errors.Is(err, io.EOF) {
			n.opts.Logger.Warn("rdma: bootstrap failed", "peer", c.nc.RemoteAddr(), "err", err)
		}
		return
	}
	if err := c.loop(); !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		n.opts.Logger.Warn("rdma: connection ended", "peer", c.nc.RemoteAddr(), "err", err)
	}
}

// teardown fences the connection before anything it could reach is
// reused: the QP goes first (no READ or WRITE of this peer executes any
// more), then the staging registration, then the leases (their slots may
// be reused once returned).
func (c *nodeConn) teardown() {
	c.nc.Close()
	if c.qp != nil {
		_ = c.qp.Close()
	}
	if c.stageMR != nil {
		_ = c.stageMR.Deregister()
	}
	if c.owner != 0 && c.n.leases != nil {
		c.n.leases.ReleaseOwner(c.owner)
	}
	unmapMem(c.staging)
}

// bootstrap reads the client's frame, connects a QP to it, registers the
// connection's staging region and answers. A refused bootstrap is
// answered with the reason, and the connection ends (io.EOF).
func (c *nodeConn) bootstrap() (err error) {
	n := c.n
	_ = c.nc.SetDeadline(time.Now().Add(n.opts.BootstrapTimeout))
	var f [bootstrapLen]byte
	if _, err := io.ReadFull(c.br, f[:]); err != nil {
		return err
	}
	peer, err := decodeBootstrap(f[:])
	if err != nil {
		var fe *wire.FrameError
		errors.As(err, &fe)
		n.opts.Logger.Warn("rdma: refusing a connection", "peer", c.nc.RemoteAddr(), "status", fe.Status.String(), "err", fe.Message)
		_ = writeRefusal(c.nc, fe.Status, fe.Message)
		return io.EOF
	}
	refuse := func(what string, err error) error {
		_ = writeRefusal(c.nc, wire.StatusUnavailable, "the node could not set the connection up: "+what+": "+err.Error())
		return fmt.Errorf("%s: %w", what, err)
	}
	if c.qp, err = n.pd.CreateQP(1); err != nil {
		return refuse("creating a queue pair", err)
	}
	if err = c.qp.Connect(peer.Endpoint); err != nil {
		return refuse("connecting the queue pair", err)
	}
	if c.staging, err = mapMem(n.opts.StagingBytes); err != nil {
		return refuse("mapping the staging region", err)
	}
	if c.stageMR, err = n.pd.Register(c.staging, AccessLocalWrite|AccessRemoteWrite); err != nil {
		return refuse("registering the staging region", err)
	}
	c.owner = n.owners.Add(1)
	w := wire.LeaseWelcome{Status: wire.StatusOK, LeaseMS: uint32(n.opts.LeaseTTL.Milliseconds()), Instance: n.instance,
		StagingBytes: n.opts.StagingBytes, LeaseWords: uint64(n.opts.LeaseMax)}
	r := regions{Words: n.wordsMR.Addr(), WordsKey: n.wordsMR.RKey(), Staging: c.stageMR.Addr(), StagingKey: c.stageMR.RKey()}
	if n.arenaMR != nil {
		w.ArenaBytes = n.arenaMR.Len()
		r.Arena, r.ArenaKey = n.arenaMR.Addr(), n.arenaMR.RKey()
	}
	b := wire.AppendLeaseWelcome(nil, w)
	b = appendBootstrap(b, bootstrap{Device: n.dev.Name(), Endpoint: c.qp.Endpoint()})
	b = appendRegions(b, r)
	if _, err := c.nc.Write(b); err != nil {
		return err
	}
	return c.nc.SetDeadline(time.Time{})
}

// loop serves requests until the client closes or breaks the protocol,
// and returns why (never nil).
func (c *nodeConn) loop() error {
	n := c.n
	lim := wire.Limits{MaxBlockBytes: n.opts.MaxBlockBytes, MaxBatchItems: uint64(n.opts.MaxBatchItems)}
	var prefix [wire.RequestPrefixLen]byte
	for {
		if _, err := io.ReadFull(c.br, prefix[:]); err != nil {
			return err
		}
		h, err := wire.DecodeRequest(prefix[:], lim)
		if err == nil && h.Op != wire.OpPing && !h.Op.IsLease() {
			err = &wire.FrameError{Status: wire.StatusUnsupported, Message: fmt.Sprintf("%s is not served on the RDMA connection: it carries PING and the lease ops; send it to the node's data port", h.Op)}
		}
		if err != nil {
			var fe *wire.FrameError
			errors.As(err, &fe)
			c.wbuf = wire.AppendResponse(c.wbuf[:0], &wire.ResponseHeader{Status: fe.Status, BodyLen: uint64(len(fe.Message))})
			c.wbuf = append(c.wbuf, fe.Message...)
			_ = c.flush()
			return fmt.Errorf("malformed request: %w", err)
		}
		c.wbuf = c.wbuf[:0]
		if h.Op == wire.OpPing {
			c.wbuf = wire.AppendResponse(c.wbuf, &wire.ResponseHeader{Status: wire.StatusOK})
		} else if err := c.leaseOp(&h); err != nil {
			return err
		}
		if err := c.flush(); err != nil {
			return err
		}
	}
}

// flush writes what is queued. A client that does not take it within
// BootstrapTimeout (which bounds a request body's arrival too) loses the
// connection, rather than hold its QP and staging region for ever.
// A buffer grown past inlineFlushAt by a large answer is let go.
func (c *nodeConn) flush() error {
	_ = c.nc.SetWriteDeadline(time.Now().Add(c.n.opts.BootstrapTimeout))
	_, err := c.nc.Write(c.wbuf)
	_ = c.nc.SetWriteDeadline(time.Time{})
	if cap(c.wbuf) > 4*inlineFlushAt {
		c.wbuf = nil
	} else {
		c.wbuf = c.wbuf[:0]
	}
	return err
}

// inlineFlushAt is how many bytes of a LEASE_GET answer are queued before
// they go out: values sent inline stream, rather than a frame of
// thousands of large items being held in memory whole.
const inlineFlushAt = 1 << 20

// leaseOp serves LEASE_GET, RELEASE and LEASE_PUT, as the shared-memory
// transport does, with arena offsets the client turns into addresses.
func (c *nodeConn) leaseOp(h *wire.RequestHeader) error {
	r, cnt := int(h.Offset), int(h.Length)
	if cap(c.body) < int(h.BodyLen) {
		c.body = make([]byte, h.BodyLen)
	}
	body := c.body[:h.BodyLen]
	_ = c.nc.SetReadDeadline(time.Now().Add(c.n.opts.BootstrapTimeout))
	if _, err := io.ReadFull(c.br, body); err != nil {
		return err
	}
	_ = c.nc.SetReadDeadline(time.Time{})
	released := c.releaseIDs(body[:r*wire.LeaseIDLen])
	items := body[r*wire.LeaseIDLen:]
	switch h.Op {
	case wire.OpRelease:
		c.wbuf = wire.AppendResponse(c.wbuf, &wire.ResponseHeader{Status: wire.StatusOK, Stored: uint64(released)})
		return nil
	case wire.OpLeasePut:
		c.leasePut(items, cnt)
		return nil
	}
	c.wbuf = wire.AppendResponse(c.wbuf, &wire.ResponseHeader{Status: wire.StatusOK, Stored: uint64(cnt)})
	for i := range cnt {
		if len(c.wbuf) >= inlineFlushAt {
			if err := c.flush(); err != nil {
				return err
			}
		}
		k, off, length := wire.DecodeGetItem(items[i*wire.LeaseItemLen:])
		if c.tryLease(k, off, length, true) {
			continue
		}
		data, stored, err := c.n.opts.Engine.Get(k, off, length, iobuf.Heap{})
		switch {
		case err != nil:
			c.wbuf = wire.AppendLeaseRecord(c.wbuf, wire.StatusOf(err), stored, wire.LeaseNone, 0, 0, 0)
		case len(data) == 0:
			c.wbuf = wire.AppendLeaseRecord(c.wbuf, wire.StatusOK, stored, wire.LeaseNone, 0, 0, 0)
		case h.Key.Tenant&wire.LeaseFlagPromote != 0 && c.tryLease(k, off, length, false):
			// The read filled RAM: that slot is leased instead.
		default:
			c.wbuf = wire.AppendLeaseRecord(c.wbuf, wire.StatusOK, stored, wire.LeaseInline, 0, uint64(len(data)), 0)
			c.wbuf = append(c.wbuf, data...)
		}
	}
	return nil
}

// tryLease leases key's resident bytes and queues the record; false when
// they are not in the arena, or too many leases hold them: nothing
// queued. When every lease is live, a lookup that counts as a hit (the
// item's first) sends the bytes it lent inline instead, so the item
// reads RAM, and counts a hit, once; one after a read (hit false, the
// read counted its miss) leaves them to the caller.
func (c *nodeConn) tryLease(k wire.BlockKey, off, length uint64, hit bool) bool {
	n := c.n
	if n.leases == nil {
		return false
	}
	a := n.opts.Arena
	data, stored, loan, ok, err := a.LendLease(k, off, length, hit)
	if !ok {
		return false
	}
	if err != nil || len(data) == 0 {
		if len(data) > 0 {
			a.Return(loan)
		}
		c.wbuf = wire.AppendLeaseRecord(c.wbuf, wire.StatusOf(err), stored, wire.LeaseNone, 0, 0, 0)
		return true
	}
	at, inArena := a.ArenaOffset(data)
	if !inArena {
		a.Return(loan)
		return false
	}
	id, _, granted := n.leases.Grant(c.owner, loan, max(stored, uint64(len(data))))
	if !granted {
		if hit {
			c.wbuf = wire.AppendLeaseRecord(c.wbuf, wire.StatusOK, stored, wire.LeaseInline, 0, uint64(len(data)), 0)
			c.wbuf = append(c.wbuf, data...)
		}
		a.Return(loan)
		return hit
	}
	c.wbuf = wire.AppendLeaseRecord(c.wbuf, wire.StatusOK, stored, wire.LeaseArena, at, uint64(len(data)), id)
	return true
}

// releaseIDs ends the connection's leases named in ids; ids of ended
// leases are normal (expired first), others' ids end nothing.
func (c *nodeConn) releaseIDs(ids []byte) int {
	t := c.n.leases
	if t == nil {
		return 0
	}
	released := 0
	for i := 0; i+wire.LeaseIDLen <= len(ids); i += wire.LeaseIDLen {
		if t.Release(c.owner, wire.LeaseID(binary.LittleEndian.Uint64(ids[i:]))) == nil {
			released++
		}
	}
	return released
}

// leasePut stores the values the client wrote into its staging region.
// The client does not write the region again until the answer.
func (c *nodeConn) leasePut(items []byte, cnt int) {
	stage := c.staging
	st := make([]byte, cnt)
	c.keys, c.vals, c.errs, c.idx = c.keys[:0], c.vals[:0], c.errs[:0], c.idx[:0]
	for i := range cnt {
		k, off, length := wire.DecodeGetItem(items[i*wire.LeaseItemLen:])
		if v := wire.StagedItemStatus(off, length, uint64(len(stage)), c.n.opts.MaxBlockBytes); v != wire.StatusOK {
			st[i] = byte(v)
			continue
		}
		c.keys = append(c.keys, k)
		c.vals = append(c.vals, stage[off:off+length:off+length])
		c.errs = append(c.errs, nil)
		c.idx = append(c.idx, i)
	}
	if len(c.keys) > 0 {
		c.n.opts.Engine.PutBatch(c.keys, c.vals, c.errs)
		for j, i := range c.idx {
			st[i] = byte(wire.StatusOf(c.errs[j]))
		}
	}
	clear(c.vals)
	c.wbuf = wire.AppendResponse(c.wbuf, &wire.ResponseHeader{Status: wire.StatusOK, Stored: uint64(cnt)})
	c.wbuf = append(c.wbuf, st...)
}
