package rdma

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"time"

	"github.com/dfkv/dfkv/wire"
)

// ClientOptions configure Dial.
type ClientOptions struct {
	// Provider is the verbs library; nil: DefaultProvider.
	Provider Provider
	// Device names the RDMA device; "": the first with an ACTIVE port.
	Device string
	// OpTimeout bounds a one-item call (0: DefaultOpTimeout);
	// BatchOpTimeout a call of several items (0: OpTimeout). Each call
	// has one absolute deadline covering its control frames and every
	// completion it waits for: a partial wait does not restart it.
	OpTimeout      time.Duration
	BatchOpTimeout time.Duration
	// DialTimeout bounds the TCP connect and the bootstrap (0: 5 s).
	DialTimeout time.Duration
	// BufferBytes is the connection's registered buffer: READs land in
	// it and WRITEs leave from it, then values are copied to or from the
	// caller's buffers. A leased value larger than it fails as TOO_LARGE
	// (0: 64 MiB).
	BufferBytes uint64
	// MaxBatchItems is the most items per frame; at most the node's
	// server.max_batch_items (0: 4096).
	MaxBatchItems int
	// Dial opens the control connection (nil: TCP).
	Dial func(ctx context.Context, addr string) (net.Conn, error)

	epoch uint8 // tests: the bootstrap's epoch (0: wire.EpochLease)
}

// queueDepth is the most work requests a client has outstanding; a group
// of items posts two per item (data, then its lease word).
const queueDepth = 256

// Conn is one RDMA connection to a node: a TCP control connection and a
// queue pair. It serves one call at a time (calls wait for each other);
// after a transport failure every call fails and the caller dials again.
type Conn struct {
	mu   sync.Mutex
	opts ClientOptions
	nc   net.Conn
	br   *bufio.Reader
	wbuf []byte
	dev  Device
	pd   PD
	qp   QP
	buf  []byte // registered: lease words at the front, then data
	// callersDeadline: the call under way ends at its caller's deadline,
	// not the transport's own timeout (begin).
	callersDeadline bool
	bufMR           MR
	welcome         wire.LeaseWelcome
	remote          regions
	pending         []wire.LeaseID // leases read, released with the next request
	broken          error
	// ctx is the current call's context while it can end early (nil
	// otherwise); wait watches it between polls.
	ctx    context.Context
	cqe    [32]Completion
	nextID uint64
	reads  []leased
}

// leased is a LEASE_GET item whose bytes are to be READ from the arena.
type leased struct {
	i      int
	offset uint64
	length uint64
	id     wire.LeaseID
}

// GetItem asks for length bytes at offset of key's value (length 0: the
// rest, as in the range contract).
type GetItem struct {
	Key    wire.BlockKey
	Offset uint64
	Length uint64
}

// GetResult is one item's answer: the value's stored length, how many
// bytes were written to its destination, or why none were.
type GetResult struct {
	Stored uint64
	N      int
	Err    error
}

// errLeaseLapsed is an item whose lease ended before the client had read
// its bytes and checked its lease word (paused past server.lease_ms): the
// bytes it read may be another value's, so it is a miss.
var errLeaseLapsed = fmt.Errorf("the lease on the value ended before its bytes were read out (the client was paused past server.lease_ms); answered as a miss: %w", wire.StatusNotFound)

// Dial connects to a node's RDMA port at addr: TCP, the bootstrap, and a
// queue pair connected to the node's.
func Dial(addr string, opts ClientOptions) (*Conn, error) {
	return DialContext(context.Background(), addr, opts)
}

// DialContext is Dial under ctx: the dial and the bootstrap end when ctx
// does (its error then wraps ctx's), or after opts.DialTimeout, whichever
// comes first.
func DialContext(parent context.Context, addr string, opts ClientOptions) (_ *Conn, err error) {
	if opts.OpTimeout <= 0 {
		opts.OpTimeout = DefaultOpTimeout
	}
	if opts.BatchOpTimeout <= 0 {
		opts.BatchOpTimeout = opts.OpTimeout
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = 5 * time.Second
	}
	if opts.BufferBytes == 0 {
		opts.BufferBytes = 64 << 20
	}
	if opts.MaxBatchItems <= 0 {
		opts.MaxBatchItems = 4096
	}
	if opts.Dial == nil {
		var d net.Dialer
		opts.Dial = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	}
	if opts.Provider == nil {
		if opts.Provider, err = DefaultProvider(); err != nil {
			return nil, fmt.Errorf("rdma: %w", err)
		}
	}
	c := &Conn{opts: opts}
	defer func() {
		if err != nil {
			c.release()
		}
	}()
	if c.dev, err = opts.Provider.Open(opts.Device); err != nil {
		return nil, fmt.Errorf("rdma: %w", err)
	}
	if len(c.dev.Name()) > maxDeviceName {
		return nil, fmt.Errorf("rdma: device name %q is longer than the %d bytes the bootstrap frame carries; give it a shorter name", c.dev.Name(), maxDeviceName)
	}
	if c.pd, err = c.dev.AllocPD(); err != nil {
		return nil, fmt.Errorf("rdma: protection domain: %w", err)
	}
	if c.qp, err = c.pd.CreateQP(queueDepth); err != nil {
		return nil, fmt.Errorf("rdma: queue pair: %w", err)
	}
	if c.buf, err = mapMem(wordsArea + opts.BufferBytes); err != nil {
		return nil, err
	}
	if c.bufMR, err = c.pd.Register(c.buf, AccessLocalWrite); err != nil {
		return nil, fmt.Errorf("rdma: registering the %d-byte buffer: %w", len(c.buf), err)
	}
	ctx, cancel := context.WithTimeout(parent, opts.DialTimeout)
	defer cancel()
	deadline, _ := ctx.Deadline()
	defer func() {
		// The caller's end, not the dial's own timeout: it says nothing
		// of RDMA to the node.
		if err != nil && parent.Err() != nil {
			err = fmt.Errorf("%w: %w", err, parent.Err())
		}
	}()
	if c.nc, err = opts.Dial(ctx, addr); err != nil {
		return nil, fmt.Errorf("rdma: connect to %s: %w", addr, err)
	}
	c.br = bufio.NewReaderSize(c.nc, 64<<10)
	_ = c.nc.SetDeadline(deadline)
	// A cancellation during the bootstrap cuts its reads short.
	stop := context.AfterFunc(ctx, func() { _ = c.nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	hello := appendBootstrap(nil, bootstrap{Epoch: opts.epoch, Device: c.dev.Name(), Endpoint: c.qp.Endpoint()})
	if _, err := c.nc.Write(hello); err != nil {
		return nil, fmt.Errorf("rdma: bootstrap to %s: %w", addr, err)
	}
	if c.welcome, err = readWelcome(c.br); err != nil {
		return nil, fmt.Errorf("rdma: %s: %w", addr, err)
	}
	var f [bootstrapLen + regionsLen]byte
	if _, err := io.ReadFull(c.br, f[:]); err != nil {
		return nil, fmt.Errorf("rdma: reading the bootstrap of %s: %w", addr, err)
	}
	peer, err := decodeBootstrap(f[:bootstrapLen])
	if err != nil {
		return nil, fmt.Errorf("rdma: the bootstrap of %s: %w", addr, err)
	}
	if c.remote, err = decodeRegions(f[bootstrapLen:]); err != nil {
		return nil, fmt.Errorf("rdma: %s: %w", addr, err)
	}
	if c.welcome.LeaseWords == 0 || c.welcome.LeaseWords > 1<<24 {
		return nil, fmt.Errorf("rdma: %s announces %d lease words: %w", addr, c.welcome.LeaseWords, wire.StatusInvalid)
	}
	if err := c.qp.Connect(peer.Endpoint); err != nil {
		return nil, fmt.Errorf("rdma: connecting the queue pair to %s (device %q): %w", addr, peer.Device, err)
	}
	if !stop() {
		return nil, fmt.Errorf("rdma: bootstrap to %s: %w", addr, context.Cause(ctx))
	}
	_ = c.nc.SetDeadline(time.Time{})
	return c, nil
}

// wordsArea is the front of the buffer where lease words land: one
// 8-byte slot per item of a group.
const (
	groupItems = queueDepth / 2
	wordsArea  = groupItems * 8
)

// Close ends the connection; the node ends its leases.
func (c *Conn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.broken == nil {
		c.broken = fmt.Errorf("rdma: connection closed: %w", wire.StatusUnavailable)
	}
	c.release()
	return nil
}

// release closes the TCP connection and the QP, then deregisters and
// unmaps the buffer: nothing can land in it any more.
func (c *Conn) release() {
	if c.nc != nil {
		_ = c.nc.Close()
		c.nc = nil
	}
	if c.qp != nil {
		_ = c.qp.Close()
		c.qp = nil
	}
	if c.bufMR != nil {
		_ = c.bufMR.Deregister()
		c.bufMR = nil
	}
	unmapMem(c.buf)
	c.buf = nil
	if c.pd != nil {
		_ = c.pd.Close()
		c.pd = nil
	}
	if c.dev != nil {
		_ = c.dev.Close()
		c.dev = nil
	}
}

// fail marks the connection broken by err and releases it; every later
// call fails with it.
func (c *Conn) fail(err error) error {
	if c.ctx != nil {
		// The caller's context ended mid-call: the connection is broken
		// (work may be in flight, a control frame half read), and the
		// error says why rather than how the I/O was cut.
		switch cerr := c.ctx.Err(); {
		case errors.Is(cerr, context.Canceled):
			err = fmt.Errorf("the call was cancelled mid-operation (%v): %w: %w", err, context.Canceled, wire.StatusUnavailable)
		case cerr != nil:
			err = fmt.Errorf("the call's deadline passed mid-operation (%v): %w: %w", err, context.DeadlineExceeded, wire.StatusTimeout)
		}
	}
	err = timeoutErr(err)
	if c.callersDeadline && wire.StatusOf(err) == wire.StatusTimeout && !errors.Is(err, context.DeadlineExceeded) {
		// The caller's own deadline, shorter than the transport's: it
		// says nothing of RDMA to the node.
		err = fmt.Errorf("%w: %w", err, context.DeadlineExceeded)
	}
	if c.broken == nil {
		c.broken = err
		c.release()
	}
	return err
}

// watch makes the call under way end when ctx ends: wait sees c.ctx's
// error, and the control connection's deadline is moved to the past, so
// a read or write on it returns. The returned func ends the watch. A
// context that cannot be cancelled costs nothing.
func (c *Conn) watch(ctx context.Context) func() {
	if ctx.Done() == nil {
		return func() {}
	}
	c.ctx = ctx
	nc := c.nc // the callback may run after the call ended and Close cleared c.nc
	cut := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(cut)
		_ = nc.SetDeadline(time.Unix(1, 0))
	})
	return func() {
		if !stop() {
			// The callback started: wait for it, so it cannot cut the
			// deadline of a later call on this connection (begin sets
			// each call's own).
			<-cut
		}
		c.ctx = nil
	}
}

// ErrTransferTooBig marks an item larger than one RDMA transfer moves
// (the connection's registered buffer, or the node's staging region for
// a PUT): not a refusal of the value, which TCP can carry.
var ErrTransferTooBig = errors.New("larger than one RDMA transfer")

// MaxPutBytes is the largest value one PUT over this connection stages.
func (c *Conn) MaxPutBytes() uint64 { return min(c.welcome.StagingBytes, c.opts.BufferBytes) }

// Broken reports whether the connection can take no more calls (a call
// failed on it, or it was closed); a pool drops it rather than keep it.
func (c *Conn) Broken() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.broken != nil
}

// ctxEndsBy reports whether ctx carries a deadline of its own, at or
// before deadline: only then is a call that ran out of time the caller's
// doing. A by derived from a client's own default timeout is the
// transport's limit as much as OpTimeout is, and its expiry a failure.
func ctxEndsBy(ctx context.Context, deadline time.Time) bool {
	d, ok := ctx.Deadline()
	return ok && !d.After(deadline)
}

// begin starts a call of n items: its one deadline, the operation
// timeout or the caller's by (when set), whichever comes first.
func (c *Conn) begin(n int, by time.Time) (time.Time, error) {
	if c.broken != nil {
		return time.Time{}, c.broken
	}
	t := c.opts.OpTimeout
	if n > 1 {
		t = c.opts.BatchOpTimeout
	}
	deadline := time.Now().Add(t)
	c.callersDeadline = !by.IsZero() && by.Before(deadline)
	if c.callersDeadline {
		deadline = by
	}
	_ = c.nc.SetDeadline(deadline)
	return deadline, nil
}

// GetBatch reads items into dst (dst[i] must hold item i's bytes) and
// fills res. A leased item is READ out of the node's arena, then its
// lease word; its bytes are copied to dst[i] only when the word still
// holds its lease. The error is the transport's: then the connection is
// broken and res is incomplete.
func (c *Conn) GetBatch(items []GetItem, dst [][]byte, res []GetResult) error {
	return c.GetBatchBy(time.Time{}, items, dst, res)
}

// GetBatchBy is GetBatch that ends by the caller's deadline by (zero:
// none) when that comes before the operation timeout.
func (c *Conn) GetBatchBy(by time.Time, items []GetItem, dst [][]byte, res []GetResult) error {
	return c.GetBatchCtx(context.Background(), by, items, dst, res)
}

// GetBatchCtx is GetBatchBy that also ends when ctx is cancelled: the
// call fails at once (errors.Is(err, context.Canceled)) and the
// connection is broken, since operations may still be in flight. A
// context that had ended before the call sends nothing and leaves the
// connection as it was.
func (c *Conn) GetBatchCtx(ctx context.Context, by time.Time, items []GetItem, dst [][]byte, res []GetResult) error {
	if len(dst) != len(items) || len(res) != len(items) {
		return fmt.Errorf("rdma: GetBatch of %d items with %d destinations and %d results: %w", len(items), len(dst), len(res), wire.StatusInvalid)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("rdma: GetBatch: %w", err) // nothing sent: the connection stays good
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	deadline, err := c.begin(len(items), by)
	c.callersDeadline = c.callersDeadline && ctxEndsBy(ctx, deadline)
	if err != nil {
		return err
	}
	defer c.watch(ctx)()
	for lo := 0; lo < len(items); lo += c.opts.MaxBatchItems {
		hi := min(lo+c.opts.MaxBatchItems, len(items))
		if err := c.leaseGet(items[lo:hi], dst[lo:hi], res[lo:hi], deadline); err != nil {
			return c.fail(err)
		}
	}
	_ = c.nc.SetDeadline(time.Time{})
	return nil
}

// Get reads one item; see GetBatch.
func (c *Conn) Get(key wire.BlockKey, offset, length uint64, dst []byte) (GetResult, error) {
	res := make([]GetResult, 1)
	err := c.GetBatch([]GetItem{{key, offset, length}}, [][]byte{dst}, res)
	return res[0], err
}

func (c *Conn) leaseGet(items []GetItem, dst [][]byte, res []GetResult, deadline time.Time) error {
	releases := min(len(c.pending), c.opts.MaxBatchItems)
	c.wbuf = wire.AppendRequest(c.wbuf[:0], &wire.RequestHeader{Op: wire.OpLeaseGet, Offset: uint64(releases), Length: uint64(len(items)),
		BodyLen: uint64(releases)*wire.LeaseIDLen + uint64(len(items))*wire.LeaseItemLen})
	c.wbuf = c.appendReleases(c.wbuf, releases)
	for _, it := range items {
		c.wbuf = wire.AppendGetItem(c.wbuf, it.Key, it.Offset, it.Length)
	}
	if err := c.send(); err != nil {
		return err
	}
	if err := c.readRecordsHeader(len(items)); err != nil {
		return err
	}
	c.reads = c.reads[:0]
	var rec [wire.LeaseRecordLen]byte
	for i, it := range items {
		if _, err := io.ReadFull(c.br, rec[:]); err != nil {
			return err
		}
		lr, err := wire.DecodeLeaseRecord(rec[:])
		if err != nil {
			return err
		}
		r := &res[i]
		*r = GetResult{Stored: lr.Stored}
		if lr.Status != wire.StatusOK {
			r.Err = lr.Status
			continue
		}
		if want, ok := wire.RangeLen(lr.Stored, it.Offset, it.Length); !ok || lr.Length != want {
			return fmt.Errorf("LEASE_GET record of %d bytes for %d bytes at offset %d of a %d-byte value: %w", lr.Length, it.Length, it.Offset, lr.Stored, wire.StatusInvalid)
		}
		switch lr.Kind {
		case wire.LeaseNone:
			continue
		case wire.LeaseInline:
			if lr.Length > uint64(len(dst[i])) {
				if _, err := c.br.Discard(int(lr.Length)); err != nil {
					return err
				}
				r.Err = fmt.Errorf("a %d-byte destination for %d bytes: %w", len(dst[i]), lr.Length, wire.StatusTooLarge)
				continue
			}
			if _, err := io.ReadFull(c.br, dst[i][:lr.Length]); err != nil {
				return err
			}
			r.N = int(lr.Length)
			continue
		}
		if lr.Offset > c.welcome.ArenaBytes || lr.Length > c.welcome.ArenaBytes-lr.Offset || uint64(lr.Lease.Index()) >= c.welcome.LeaseWords {
			return fmt.Errorf("LEASE_GET lease %#x of %d bytes at arena offset %d, past the %d-byte arena or its lease words: %w",
				uint64(lr.Lease), lr.Length, lr.Offset, c.welcome.ArenaBytes, wire.StatusInvalid)
		}
		c.pending = append(c.pending, lr.Lease)
		switch {
		case lr.Length > uint64(len(dst[i])):
			r.Err = fmt.Errorf("a %d-byte destination for %d bytes: %w", len(dst[i]), lr.Length, wire.StatusTooLarge)
		case lr.Length > c.opts.BufferBytes:
			r.Err = fmt.Errorf("a leased %d-byte value is larger than the connection's %d-byte registered buffer: %w: %w", lr.Length, c.opts.BufferBytes, ErrTransferTooBig, wire.StatusTooLarge)
		default:
			c.reads = append(c.reads, leased{i: i, offset: lr.Offset, length: lr.Length, id: lr.Lease})
		}
	}
	// The stream is consumed; now the one-sided part, in groups that fit
	// the buffer and the queue.
	for lo := 0; lo < len(c.reads); {
		hi, used := lo, uint64(0)
		for hi < len(c.reads) && hi-lo < groupItems && used+c.reads[hi].length <= c.opts.BufferBytes {
			used += c.reads[hi].length
			hi++
		}
		if err := c.readGroup(c.reads[lo:hi], dst, res, deadline); err != nil {
			return err
		}
		lo = hi
	}
	return nil
}

// readGroup READs every item's bytes into the buffer, then every item's
// lease word, waits for every completion, and copies out the items whose
// word still held their lease after their bytes were read. The first word
// READ is fenced, so no word is read before every value's READ has
// completed: READs in flight together may read the peer's memory in any
// order.
func (c *Conn) readGroup(group []leased, dst [][]byte, res []GetResult, deadline time.Time) error {
	data := c.buf[wordsArea:]
	off := uint64(0)
	for _, l := range group {
		if err := c.post(OpRead, data[off:off+l.length], c.remote.Arena+l.offset, c.remote.ArenaKey, false); err != nil {
			return err
		}
		off += l.length
	}
	for j, l := range group {
		if err := c.post(OpRead, c.buf[j*8:j*8+8], c.remote.Words+8*uint64(l.id.Index()), c.remote.WordsKey, j == 0); err != nil {
			return err
		}
	}
	if err := c.wait(2*len(group), deadline); err != nil {
		return err
	}
	off = 0
	for j, l := range group {
		r := &res[l.i]
		if binary.NativeEndian.Uint64(c.buf[j*8:]) == uint64(l.id) {
			r.N = copy(dst[l.i], data[off:off+l.length])
		} else {
			*r = GetResult{Stored: r.Stored, Err: errLeaseLapsed}
		}
		off += l.length
	}
	return nil
}

// PutBatch stores vals[i] under keys[i], errs[i] its result: values are
// WRITTEN into the connection's staging region at the node, as many as
// fit at once, and then named in a LEASE_PUT. A value larger than the
// staging region or the buffer is TOO_LARGE. The error is the
// transport's: then the connection is broken and errs is incomplete.
func (c *Conn) PutBatch(keys []wire.BlockKey, vals [][]byte, errs []error) error {
	return c.PutBatchBy(time.Time{}, keys, vals, errs)
}

// PutBatchBy is PutBatch that ends by the caller's deadline by (zero:
// none) when that comes before the operation timeout.
func (c *Conn) PutBatchBy(by time.Time, keys []wire.BlockKey, vals [][]byte, errs []error) error {
	return c.PutBatchCtx(context.Background(), by, keys, vals, errs)
}

// PutBatchCtx is PutBatchBy that also ends when ctx is cancelled (see
// GetBatchCtx).
func (c *Conn) PutBatchCtx(ctx context.Context, by time.Time, keys []wire.BlockKey, vals [][]byte, errs []error) error {
	if len(vals) != len(keys) || len(errs) != len(keys) {
		return fmt.Errorf("rdma: PutBatch of %d keys with %d values and %d results: %w", len(keys), len(vals), len(errs), wire.StatusInvalid)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("rdma: PutBatch: %w", err) // nothing sent: the connection stays good
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	deadline, err := c.begin(len(keys), by)
	c.callersDeadline = c.callersDeadline && ctxEndsBy(ctx, deadline)
	if err != nil {
		return err
	}
	defer c.watch(ctx)()
	limit := c.MaxPutBytes()
	idx := make([]int, 0, len(keys))
	for i, v := range vals {
		switch {
		case len(v) == 0:
			errs[i] = fmt.Errorf("an empty value: %w", wire.StatusInvalid)
		case uint64(len(v)) > limit:
			errs[i] = fmt.Errorf("a %d-byte value is larger than the %d bytes one RDMA PUT stages: %w: %w", len(v), limit, ErrTransferTooBig, wire.StatusTooLarge)
		default:
			idx = append(idx, i)
		}
	}
	for lo := 0; lo < len(idx); {
		hi, used := lo, uint64(0)
		for hi < len(idx) && hi-lo < min(c.opts.MaxBatchItems, queueDepth) && used+uint64(len(vals[idx[hi]])) <= limit {
			used += uint64(len(vals[idx[hi]]))
			hi++
		}
		if err := c.putGroup(idx[lo:hi], keys, vals, errs, deadline); err != nil {
			return c.fail(err)
		}
		lo = hi
	}
	_ = c.nc.SetDeadline(time.Time{})
	return nil
}

// putGroup WRITEs the group's values into staging, waits for the
// completions (a WRITE completes once the node acknowledged it), then
// sends the LEASE_PUT that names them.
func (c *Conn) putGroup(group []int, keys []wire.BlockKey, vals [][]byte, errs []error, deadline time.Time) error {
	data := c.buf[wordsArea:]
	off := uint64(0)
	for _, i := range group {
		n := uint64(len(vals[i]))
		copy(data[off:off+n], vals[i])
		if err := c.post(OpWrite, data[off:off+n], c.remote.Staging+off, c.remote.StagingKey, false); err != nil {
			return err
		}
		off += n
	}
	if err := c.wait(len(group), deadline); err != nil {
		return err
	}
	releases := min(len(c.pending), c.opts.MaxBatchItems)
	c.wbuf = wire.AppendRequest(c.wbuf[:0], &wire.RequestHeader{Op: wire.OpLeasePut, Offset: uint64(releases), Length: uint64(len(group)),
		BodyLen: uint64(releases)*wire.LeaseIDLen + uint64(len(group))*wire.LeaseItemLen})
	c.wbuf = c.appendReleases(c.wbuf, releases)
	off = 0
	for _, i := range group {
		c.wbuf = wire.AppendGetItem(c.wbuf, keys[i], off, uint64(len(vals[i])))
		off += uint64(len(vals[i]))
	}
	if err := c.send(); err != nil {
		return err
	}
	if err := c.readRecordsHeader(len(group)); err != nil {
		return err
	}
	st := make([]byte, len(group))
	if _, err := io.ReadFull(c.br, st); err != nil {
		return err
	}
	for j, i := range group {
		if s := wire.Status(st[j]); s != wire.StatusOK {
			if !s.Known() {
				return fmt.Errorf("LEASE_PUT record with unknown status %d: %w", st[j], wire.StatusInvalid)
			}
			errs[i] = s
		} else {
			errs[i] = nil
		}
	}
	return nil
}

// Ping asks the node for an answer on the control connection.
func (c *Conn) Ping() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := c.begin(1, time.Time{}); err != nil {
		return err
	}
	c.wbuf = wire.AppendRequest(c.wbuf[:0], &wire.RequestHeader{Op: wire.OpPing})
	if err := c.send(); err != nil {
		return c.fail(err)
	}
	if err := c.readRecordsHeader(0); err != nil {
		return c.fail(err)
	}
	_ = c.nc.SetDeadline(time.Time{})
	return nil
}

// appendReleases moves the first n pending lease ids into a request. If
// the request fails, the connection closes, and the node ends every
// lease of a closed connection.
func (c *Conn) appendReleases(dst []byte, n int) []byte {
	for _, id := range c.pending[:n] {
		dst = binary.LittleEndian.AppendUint64(dst, uint64(id))
	}
	c.pending = append(c.pending[:0], c.pending[n:]...)
	return dst
}

func (c *Conn) send() error {
	_, err := c.nc.Write(c.wbuf)
	return err
}

// readRecordsHeader reads a response prefix that must be OK and announce
// n records (a refusal carries a message and ends the connection).
func (c *Conn) readRecordsHeader(n int) error {
	var p [wire.ResponsePrefixLen]byte
	if _, err := io.ReadFull(c.br, p[:]); err != nil {
		return timeoutErr(err)
	}
	h, err := wire.DecodeResponse(p[:])
	if err != nil {
		return err
	}
	if h.Status != wire.StatusOK {
		msg := make([]byte, min(h.BodyLen, wire.MaxErrorMessage))
		_, _ = io.ReadFull(c.br, msg)
		return &wire.StatusError{Status: h.Status, Message: string(msg)}
	}
	if h.Stored != uint64(n) || h.BodyLen != 0 {
		return fmt.Errorf("answer of %d records (body %d) to a request of %d items: %w", h.Stored, h.BodyLen, n, wire.StatusInvalid)
	}
	return nil
}

// post queues one READ or WRITE between local (inside the buffer) and
// the node's memory.
func (c *Conn) post(op Opcode, local []byte, remote uint64, rkey uint32, fence bool) error {
	c.nextID++
	if err := c.qp.Post(WorkRequest{ID: c.nextID, Op: op, Local: local, LKey: c.bufMR.LKey(), Remote: remote, RKey: rkey, Fence: fence}); err != nil {
		return fmt.Errorf("posting an RDMA %s: %v: %w", op, err, wire.StatusUnavailable)
	}
	return nil
}

// wait polls until n completions came or the deadline passed. Any
// status other than success fails the call (and the connection: the QP
// is in the error state, its later requests flushed).
func (c *Conn) wait(n int, deadline time.Time) error {
	var first error
	for spins := 0; n > 0; spins++ {
		got, err := c.qp.Poll(c.cqe[:min(n, len(c.cqe))])
		if err != nil {
			return fmt.Errorf("polling the completion queue: %v: %w", err, wire.StatusUnavailable)
		}
		for _, e := range c.cqe[:got] {
			if e.Status != WCSuccess && first == nil {
				first = fmt.Errorf("RDMA %s completed with %s: %w", e.Op, e.Status, wire.StatusUnavailable)
			}
		}
		n -= got
		if got > 0 {
			spins = 0
			continue
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("%d RDMA operations still in flight at the call's deadline: %w", n, wire.StatusTimeout)
		}
		if c.ctx != nil && c.ctx.Err() != nil {
			return fmt.Errorf("%d RDMA operations still in flight", n) // fail says why
		}
		// Poll hot for a while (a completion is microseconds away),
		// then back off so a slow peer does not cost a core.
		if spins < 100 {
			runtime.Gosched()
		} else {
			time.Sleep(time.Duration(min(spins-99, 100)) * 10 * time.Microsecond)
		}
	}
	return first
}

// timeoutErr maps a deadline on the control connection to TIMEOUT.
func timeoutErr(err error) error {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("the node did not answer before the call's deadline: %v: %w", err, wire.StatusTimeout)
	}
	return err
}
