package server

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/engine/iobuf"
	"github.com/dfkv/dfkv/roles/internal/creds"
	"github.com/dfkv/dfkv/wire"
	"github.com/dfkv/dfkv/wire/deadline"
)

const (
	readBufSize = 64 << 10
	// inlineLimit is the largest payload copied into the write buffer;
	// bigger ones go out with writev straight from the engine's buffer.
	inlineLimit = 16 << 10
	// flushAt is how much buffered response data forces a flush even when
	// more pipelined requests are waiting.
	flushAt = 256 << 10

	// lingerFloor and lingerTime bound the lingering close after a refused
	// frame (conn.linger): the node reads and drops at most the refused
	// body, at most max(lingerFloor, 2 × max_block_bytes) bytes of it, for
	// at most lingerTime, whichever ends first. The floor covers a client
	// left on the 64 MiB default against a smaller node, twice the node's
	// limit the usual mismatch, and 2 s moves 128 MiB even over 1 GbE; a
	// client past either bound gets a reset after the response.
	lingerFloor = 128 << 20
	lingerTime  = 2 * time.Second
)

// conn is one client connection. Requests are read, executed and answered
// strictly in order on one goroutine, which is what makes replies FIFO;
// responses of pipelined requests are batched into one write while more
// requests are already buffered.
type conn struct {
	s   *Server
	nc  net.Conn
	raw *rawSock // nc's socket, read and written with raw system calls; nil: use nc
	// batch gathers a TLS connection's records into few writes (tlsbatch.go); nil without TLS.
	batch *recordBatcher
	br    *bufio.Reader

	sc    *scratch    // wbuf comes from it while the connection serves
	tb    *tables     // table and stat come from it while a batch is served
	wbuf  []byte      // pending response bytes
	iov   [2][]byte   // backing array for writev
	bufs  net.Buffers // reused writev vector
	hdr   [wire.RequestPrefixLen]byte
	table []byte // batch item table scratch
	stat  []byte // batch status scratch
	// BATCH_EXIST's keys and answers.
	existKeys   []wire.BlockKey
	existStored []uint64
	existErrs   []error
	existIdx    []int32                    // with credentials: the request positions of the keys looked up
	pinnedNow   map[wire.BlockKey]struct{} // keys the BATCH_EXIST being answered pinned (firstPinOf)
	lent        *iobuf.Buf                 // buffer lent to the engine by Alloc
	loan        engine.Loan                // bytes the engine lent (valid while onLoan)
	onLoan      bool
	held        []*iobuf.Buf    // BATCH_PUT values read but not yet stored
	budget      int64           // payload budget bytes this connection holds (payloadBudget)
	blockedAt   atomic.Int64    // while blocked on its client holding budget: since when (stalled.go); 0: not
	reserved    int64           // payload budget bytes it holds from the small-request reserve
	loans       []engine.Loan   // BATCH_PUT values the engine received, not yet committed
	keys        []wire.BlockKey // BATCH_PUT chunk scratch
	vals        [][]byte
	errs        []error

	// lease is the connection's shared-memory state once its lease hello
	// is answered (shm.go); needHello: it came in on the shared-memory
	// socket and has not sent its hello yet.
	lease     *shmConn
	needHello bool

	auth connAuth // the token this connection presented (auth.go)
	// blindRun is, by tenant, the bytes of the BATCH_PUT run not yet
	// stored that blindOver admitted (write-only credentials only).
	blindRun map[uint64]uint64

	writeDeadline deadline.Lazy // the socket's write deadline (armWrite)
	status        wire.Status   // status of the request being answered, for metrics
	pastFirst     bool          // the first request is answered: bodies get BodyTimeout (the first one's is FirstRequest, when set)
	firstDeadline time.Time     // when the first request must have arrived (FirstRequest after accept)
	unread        uint64        // body bytes of a refused frame still in the socket, as its prefix declared (linger)

	mu      sync.Mutex
	busy    bool // a request's first byte has arrived and it is being served
	stopped bool // shutdown (or max_conns, for the longest-idle one) asked this connection to end
	// inPrefix: the request's first bytes arrived but not its whole
	// prefix, so the connection waits on its client as an idle one does.
	inPrefix  bool
	waitSince time.Time // when it last began waiting on its client (idle, or in a prefix)
	cut       bool      // closed by closeIdlest (under the server's mu)
	// rdma: the connection is an RDMA session's control channel, served
	// by the RDMA transport for the session's life. Its requests do not
	// pass begin and end, so it never counts as waiting on its client:
	// max_conns must not close a session in use as the longest idle.
	rdma bool
}

func newConn(s *Server, nc net.Conn) *conn {
	c := &conn{
		s:         s,
		nc:        nc,
		waitSince: s.opts.Clock.Now(),
	}
	var r io.Reader = nc
	if c.raw = newRawSock(nc); c.raw != nil {
		r = c.raw
	}
	c.br = bufio.NewReaderSize(countingReader{r, &s.stats.bytesIn}, readBufSize)
	return c
}

// countingReader counts the bytes a connection received (one atomic add
// per read call, not per request): a request's declared body length is
// what a client promised, not what arrived.
type countingReader struct {
	r io.Reader
	n *atomic.Uint64
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(uint64(n))
	return n, err
}

// Alloc implements engine.Allocator: it lends the engine a pooled buffer
// that serve returns to the pool once the response is written. read took
// budget for it; a value that grew since (replaced between read's Exist
// and the engine's read) takes the rest if it is free and goes over the
// budget by that much if not: the engine may hold a lock here, so Alloc
// must not wait.
func (c *conn) Alloc(n int) []byte {
	if c.lent != nil {
		c.s.pool.Put(c.lent)
		c.lent = nil
	}
	if n > c.s.pool.Max() {
		// A value stored under a larger max_block_bytes, which read's
		// Exist did not see (it arrived meanwhile): the pool has no
		// buffer that large, so this one read gets its own.
		return iobuf.AlignedSlice(n)[:n]
	}
	if need := int64(iobuf.SizeFor(n)); need > c.budgetHeld() {
		c.grab(need - c.budgetHeld())
	}
	c.lent = c.s.pool.Get(n)
	return c.lent.B
}

// errBusy answers a request that waited its whole timeout for payload
// buffer budget.
func (c *conn) errBusy(wait time.Duration) error {
	if c.s.stop.Err() != nil {
		return fmt.Errorf("dfkv node shutting down: it gave up waiting for a payload buffer; retry after its restart: %w", wire.StatusUnavailable)
	}
	return fmt.Errorf("dfkv node busy: its payload buffers (server.buffer_budget_bytes = %d bytes) stayed in use for %s; retry, or raise the budget: %w",
		c.s.budget.total, wait, wire.StatusUnavailable)
}

// takeBudget takes n bytes of payload budget for a request whose body is
// still to be read, waiting at most BodyTimeout; after a wait the body's
// read deadline starts again. The connection must hold no budget.
func (c *conn) takeBudget(n int64) bool {
	if c.grab(n) {
		return true
	}
	ok, res := c.s.budget.acquire(c.s.stop, n, c.s.opts.BodyTimeout)
	_ = c.nc.SetReadDeadline(c.s.opts.Clock.Now().Add(c.s.opts.BodyTimeout))
	if ok {
		c.note(n, res)
	}
	return ok
}

// grab takes n bytes of payload budget if they are free now.
func (c *conn) grab(n int64) bool {
	ok, res := c.s.budget.tryAcquire(n)
	if ok {
		c.note(n, res)
	}
	return ok
}

// note records n bytes of budget taken from the main budget or the
// reserve.
func (c *conn) note(n int64, fromReserve bool) {
	if fromReserve {
		c.reserved += n
	} else {
		c.budget += n
	}
}

// budgetHeld is the payload budget the connection holds.
func (c *conn) budgetHeld() int64 { return c.budget + c.reserved }

// dropBudget gives back the budget the connection holds.
func (c *conn) dropBudget() {
	c.s.budget.release(c.budget, false)
	c.s.budget.release(c.reserved, true)
	c.budget, c.reserved = 0, 0
}

// read is a GET's engine read: bytes lent in place when the engine can
// (the RAM tier), else copied by Get into a pooled buffer. Either way
// release gives them back once the response is written.
func (c *conn) read(key wire.BlockKey, offset, length uint64) ([]byte, uint64, error) {
	if l := c.s.lender; l != nil {
		data, stored, loan, ok, err := l.Lend(key, offset, length)
		if ok {
			if len(data) > 0 {
				c.loan, c.onLoan = loan, true
			}
			return data, stored, err
		}
	}
	// Get reads into a pooled buffer (Alloc): take budget for it first,
	// sized by the stored value. A key Exist cannot find, or a range past
	// its end, needs none (Get answers it: the miss, or INVALID).
	eng := c.s.opts.Engine
	stored, err := eng.Exist(key)
	if n, inRange := wire.RangeLen(stored, offset, length); err == nil && inRange {
		if n > c.s.opts.MaxBlockBytes {
			// Stored under a larger max_block_bytes (the node was
			// restarted with a smaller one): no buffer of this node's
			// holds it, and no client of its size could take it.
			return nil, stored, fmt.Errorf("the value of %d bytes was stored under a larger server.max_block_bytes than this node's %d: raise it to read the value, or read it in ranges of at most that: %w",
				stored, c.s.opts.MaxBlockBytes, wire.StatusTooLarge)
		}
		need := int64(iobuf.SizeFor(int(n)))
		ok, res := c.s.budget.acquire(c.s.stop, need, c.s.opts.WriteTimeout)
		if !ok {
			return nil, stored, c.errBusy(c.s.opts.WriteTimeout)
		}
		c.note(need, res)
	}
	return eng.Get(key, offset, length, c)
}

func (c *conn) clearReadDeadline() { _ = c.nc.SetReadDeadline(time.Time{}) }

// scratch is a connection's working memory for serving requests: the
// response buffer (about 272 KiB). A connection holds one only while it
// has requests to serve and gives it back before it waits on its client,
// for the next request or for the rest of one (a body, a batch's table:
// awaitClient), so neither idle connections nor clients that announce a
// body and stall each keep it: that memory is outside the payload budget.
type scratch struct {
	wbuf []byte
}

const wbufCap = flushAt + wire.ResponsePrefixLen + inlineLimit

var scratchPool = sync.Pool{New: func() any { return &scratch{wbuf: make([]byte, 0, wbufCap)} }}

// tables are a batch request's item table and statuses, kept from the
// table's arrival to the response. A table grows with the bytes received
// (readTable), so a stalled batch holds what its client sent.
type tables struct {
	table, stat []byte
	// The per-item slices of BATCH_EXIST and BATCH_PUT, pooled with the
	// tables so that a connection that once served a large batch does
	// not keep them while idle. They hold no references when pooled.
	existKeys   []wire.BlockKey
	existStored []uint64
	existErrs   []error
	existIdx    []int32
	keys        []wire.BlockKey
	vals        [][]byte
	errs        []error
	held        []*iobuf.Buf
	loans       []engine.Loan
}

var tablesPool = sync.Pool{New: func() any { return new(tables) }}

// takeScratch gives the connection its response buffer.
func (c *conn) takeScratch() {
	if c.sc != nil {
		return
	}
	c.sc = scratchPool.Get().(*scratch)
	c.s.stats.serving.Add(1)
	c.wbuf = c.sc.wbuf[:0]
}

// returnScratch gives back the response buffer, which must be flushed,
// and the batch tables.
func (c *conn) returnScratch() {
	c.returnTables()
	c.returnReplyBuffer()
}

// returnReplyBuffer gives back the response buffer, which must be
// flushed. A buffer grown far past its usual size is dropped rather than
// pooled.
func (c *conn) returnReplyBuffer() {
	if c.sc == nil || len(c.wbuf) > 0 {
		return
	}
	if cap(c.wbuf) <= 4*wbufCap {
		c.sc.wbuf = c.wbuf[:0]
	}
	scratchPool.Put(c.sc)
	c.s.stats.serving.Add(-1)
	c.sc, c.wbuf = nil, nil
}

func (c *conn) takeTables() {
	if c.tb != nil {
		return
	}
	tb := tablesPool.Get().(*tables)
	c.tb = tb
	c.table, c.stat = tb.table, tb.stat
	c.existKeys, c.existStored, c.existErrs, c.existIdx = tb.existKeys, tb.existStored, tb.existErrs, tb.existIdx
	c.keys, c.vals, c.errs, c.held, c.loans = tb.keys, tb.vals, tb.errs, tb.held, tb.loans
}

func (c *conn) returnTables() {
	if c.tb == nil {
		return
	}
	tb := c.tb
	clear(c.errs[:cap(c.errs)]) // the engine's answers to the last batch
	tb.table, tb.stat = c.table[:0], c.stat[:0]
	tb.existKeys, tb.existStored, tb.existErrs, tb.existIdx = c.existKeys[:0], c.existStored[:0], c.existErrs[:0], c.existIdx[:0]
	tb.keys, tb.vals, tb.errs, tb.held, tb.loans = c.keys[:0], c.vals[:0], c.errs[:0], c.held[:0], c.loans[:0]
	tablesPool.Put(tb)
	c.tb, c.table, c.stat = nil, nil, nil
	c.existKeys, c.existStored, c.existErrs, c.existIdx = nil, nil, nil, nil
	c.keys, c.vals, c.errs, c.held, c.loans = nil, nil, nil, nil, nil
}

// awaitClient comes before reading n more bytes of the request being
// served. When they have not all arrived, the replies pending go out and
// the response buffer goes back: the client may take up to the body
// deadline to send them, and a stalled one then holds no working memory
// but what it sent. After the read, takeScratch.
func (c *conn) awaitClient(n int) error {
	if c.sc == nil || c.br.Buffered() >= n {
		return nil
	}
	if err := c.flush(); err != nil {
		return err
	}
	c.returnReplyBuffer() // the tables stay: the request is using them
	return nil
}

// readFull reads len(dst) bytes of the request's body (awaitClient).
func (c *conn) readFull(dst []byte) error {
	if err := c.awaitClient(len(dst)); err != nil {
		return err
	}
	_, err := io.ReadFull(c.br, dst)
	c.takeScratch()
	return err
}

// discard reads n bytes of the request's body and drops them
// (awaitClient).
func (c *conn) discard(n int) error {
	if err := c.awaitClient(n); err != nil {
		return err
	}
	_, err := c.br.Discard(n)
	c.takeScratch()
	return err
}

func (c *conn) release() {
	if c.lent != nil {
		c.s.pool.Put(c.lent)
		c.lent = nil
	}
	c.dropBudget()
	if c.onLoan {
		c.s.lender.Return(c.loan)
		c.onLoan = false
	}
}

// stopIfIdle ends the connection if it is waiting for a request; a busy
// connection finishes its request and then sees stopped.
func (c *conn) stopIfIdle() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopped = true
	if !c.busy || c.inPrefix {
		_ = c.nc.SetReadDeadline(time.Unix(1, 0))
	}
}

// waitingFor reports how long the connection has waited on its client
// (idle, in a request prefix, or sending replies it does not read); false
// when it is serving a request or already stopped.
func (c *conn) waitingFor(now time.Time) (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.waitedLocked(now)
}

// waitedLocked is waitingFor with c.mu held.
func (c *conn) waitedLocked(now time.Time) (time.Duration, bool) {
	if c.stopped || c.rdma || (c.busy && !c.inPrefix) {
		return 0, false
	}
	return now.Sub(c.waitSince), true
}

// cutIfWaiting ends the connection if it has waited on its client at
// least min, checked and done under one hold of its lock (a request that
// begins in between is never cut). Both deadlines move into the past: an
// idle connection may be blocked writing replies its client does not
// read.
func (c *conn) cutIfWaiting(now time.Time, min time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d, ok := c.waitedLocked(now); !ok || d < min {
		return false
	}
	c.stopped = true
	_ = c.nc.SetDeadline(time.Unix(1, 0))
	return true
}

func (c *conn) begin() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return false
	}
	c.busy = true
	return true
}

func (c *conn) end() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.busy = false
	c.waitSince = c.s.opts.Clock.Now()
	return !c.stopped
}

// readPrefix reads a request's prefix. When it has not all arrived with
// the first byte, the connection waits on its client as an idle one does:
// shutdown (and max_conns) may cut it there, and a client that stops
// mid-prefix is cut after BodyTimeout (or the first request's deadline)
// rather than holding the connection, and Serve's drain, for ever. The
// common case, a prefix that arrived whole, costs no deadline.
func (c *conn) readPrefix() error {
	if c.br.Buffered() >= len(c.hdr) {
		_, err := io.ReadFull(c.br, c.hdr[:])
		return err
	}
	if !c.pastFirst {
		if err := c.shortFirstPrefix(); err != nil {
			return err
		}
		if c.br.Buffered() >= len(c.hdr) {
			_, err := io.ReadFull(c.br, c.hdr[:])
			return err
		}
	}
	// The replies of requests already served go out before the wait
	// (a cut would drop them), and the working memory goes back.
	if err := c.flush(); err != nil {
		return err
	}
	c.returnScratch()
	c.mu.Lock()
	c.inPrefix = true
	c.waitSince = c.s.opts.Clock.Now()
	armed := false
	switch {
	case c.stopped:
		_ = c.nc.SetReadDeadline(time.Unix(1, 0))
	case c.pastFirst || c.s.opts.FirstRequest == 0:
		_ = c.nc.SetReadDeadline(c.s.opts.Clock.Now().Add(c.s.opts.BodyTimeout))
		armed = true
	}
	c.mu.Unlock()
	_, err := io.ReadFull(c.br, c.hdr[:])
	c.mu.Lock()
	c.inPrefix = false
	if armed && !c.stopped {
		_ = c.nc.SetReadDeadline(time.Time{})
	}
	c.mu.Unlock()
	return err
}

func (c *conn) serve() {
	defer c.s.removeConn(c)
	defer c.nc.Close()
	defer c.endLease()
	defer c.release()
	log := c.s.log
	if d := c.s.opts.FirstRequest; d > 0 {
		c.firstDeadline = c.s.opts.Clock.Now().Add(d)
		_ = c.nc.SetReadDeadline(c.firstDeadline)
	}
	if c.needHello {
		if err := c.bootstrap(); err != nil {
			if isTimeout(err) && !c.isStopped() {
				c.s.stats.firstReqTimeouts.Add(1)
			}
			return
		}
		c.needHello = false
	}
	defer func() {
		c.wbuf = c.wbuf[:0] // what a failed flush left is never sent
		c.returnScratch()
	}()
	for {
		if c.br.Buffered() == 0 {
			if len(c.wbuf) > 0 {
				if err := c.flush(); err != nil {
					return
				}
			}
			c.returnScratch() // about to wait for the client
		}
		// Wait for the next request without holding it: Peek lets
		// shutdown interrupt an idle connection and only an idle one.
		if _, err := c.br.Peek(1); err != nil {
			if !c.pastFirst && c.tlsFailed(err) {
				return
			}
			if !c.pastFirst && isTimeout(err) && !c.isStopped() {
				c.s.stats.firstReqTimeouts.Add(1)
				c.s.firstReqWarn.Warn(log, time.Now(), "closing connection: no complete first request within the deadline",
					"remote", c.nc.RemoteAddr().String(), "first_request_ms", c.s.opts.FirstRequest.Milliseconds())
			}
			return
		}
		if !c.pastFirst && c.lease == nil {
			if b, _ := c.br.Peek(1); b[0] == wire.EpochLease {
				c.serveRDMA()
				return
			}
		}
		if !c.begin() {
			// Shutdown: replies of pipelined requests already executed
			// still go out.
			_ = c.flush()
			return
		}
		err := c.handleOne()
		if err != nil {
			c.onError(err)
			return
		}
		if !c.pastFirst {
			c.pastFirst = true
			if c.s.opts.FirstRequest > 0 {
				_ = c.nc.SetReadDeadline(time.Time{})
			}
		}
		if !c.end() {
			_ = c.flush()
			return
		}
	}
}

func (c *conn) isStopped() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopped
}

// onError answers a refused frame with its status and message, and logs
// the other ways a connection can end mid-request.
func (c *conn) onError(err error) {
	var fe *wire.FrameError
	if errors.As(err, &fe) {
		if fe.Status != wire.StatusUnauthenticated { // counted and logged by authFailed
			c.s.stats.frameErrors.Add(1)
			c.s.frameWarn.Warn(c.s.log, time.Now(), "closing connection after malformed request",
				"remote", c.nc.RemoteAddr().String(), "status", fe.Status.String(), "error", fe.Message)
		}
		msg := fe.Message
		if len(msg) > wire.MaxErrorMessage {
			msg = msg[:wire.MaxErrorMessage]
		}
		c.wbuf = wire.AppendResponse(c.wbuf, &wire.ResponseHeader{Status: fe.Status, BodyLen: uint64(len(msg))})
		c.wbuf = append(c.wbuf, msg...)
		if c.flush() == nil {
			c.linger()
		}
		return
	}
	if isTimeout(err) && c.isStopped() || errors.Is(err, errStalledCut) {
		return // cut by shutdown, at max_conns as the longest idle, or for stalling (logged there)
	}
	if !c.pastFirst && c.s.opts.FirstRequest > 0 && isTimeout(err) {
		// The first request's deadline (its body has it too, when set).
		c.s.stats.firstReqTimeouts.Add(1)
		c.s.firstReqWarn.Warn(c.s.log, time.Now(), "closing connection: no complete first request within the deadline",
			"remote", c.nc.RemoteAddr().String(), "first_request_ms", c.s.opts.FirstRequest.Milliseconds())
		return
	}
	if isTimeout(err) {
		c.s.bodyStallWarn.Warn(c.s.log, time.Now(), "closing connection: a request (its prefix or body) stalled past the body deadline",
			"remote", c.nc.RemoteAddr().String(), "body_timeout", c.s.opts.BodyTimeout.String())
		return
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) {
		return // the client went away mid-request; nothing was applied
	}
	c.s.log.Debug("connection ended", "remote", c.nc.RemoteAddr().String(), "error", err.Error())
}

// linger closes a connection whose refusal was just written without
// making the kernel reset it: closing with unread bytes queued sends RST,
// and a client still writing the refused body may then lose the refusal
// and back the node off as unreachable. So it half-closes (the client
// reads the refusal, then EOF) and reads and drops the rest of the body,
// within lingerFloor and lingerTime, before serve closes.
//
// The connection counts as idle while it lingers, so a shutdown skips or
// cuts the linger (stopIfIdle) and never waits on it. Without a
// half-close (a net.Pipe in a test) it does nothing: with no FIN the
// client would see the response end only when the linger did.
func (c *conn) linger() {
	n := min(c.unread, max(lingerFloor, 2*c.s.opts.MaxBlockBytes))
	cw, ok := c.nc.(interface{ CloseWrite() error })
	if n == 0 || !ok {
		return
	}
	if cw.CloseWrite() != nil {
		return
	}
	// The deadline before end: once the connection is idle, only
	// stopIfIdle may move it.
	_ = c.nc.SetReadDeadline(c.s.opts.Clock.Now().Add(c.s.opts.lingerTime))
	if !c.end() {
		return // shutting down: close now
	}
	// Ends early at EOF (the client gave up), the deadline or shutdown.
	_, _ = c.br.Discard(int(n))
}

func isTimeout(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }

// armWrite gives the socket a write deadline WriteTimeout from now, or
// keeps one at most writeSlack earlier (package deadline).
func (c *conn) armWrite() {
	if d := c.s.opts.Clock.Now().Add(c.s.opts.WriteTimeout); c.writeDeadline.Move(d, c.s.writeSlack) {
		_ = c.nc.SetWriteDeadline(d)
	}
}

func (c *conn) flush() error {
	if len(c.wbuf) == 0 {
		return nil
	}
	c.armWrite()
	n, err := c.write(c.wbuf, nil)
	c.s.stats.bytesOut.Add(uint64(n))
	c.wbuf = c.wbuf[:0]
	return err
}

// writePayload queues the response bytes in wbuf and then data: small data
// is copied into wbuf, large data goes out with one writev together with
// whatever is pending.
func (c *conn) writePayload(data []byte) error {
	if len(data) <= inlineLimit {
		c.wbuf = append(c.wbuf, data...)
		if len(c.wbuf) >= flushAt {
			return c.flush()
		}
		return nil
	}
	c.armWrite()
	n, err := c.write(c.wbuf, data)
	c.s.stats.bytesOut.Add(uint64(n))
	c.wbuf = c.wbuf[:0]
	return err
}

// write sends a and then b with one writev where it can; a connection cut
// meanwhile for stalling while others wait for its budget (stalled.go)
// fails with errStalledCut.
func (c *conn) write(a, b []byte) (int, error) {
	marked := c.blockOnClient()
	n, err := c.writeOut(a, b)
	if cut := c.unblock(marked); cut != nil {
		return n, cut
	}
	return n, err
}

func (c *conn) writeOut(a, b []byte) (int, error) {
	if c.raw != nil {
		return c.raw.writev(a, b)
	}
	c.iov[0], c.iov[1] = a, b
	c.bufs = c.iov[:]
	// A response that fits one TLS record is one write already.
	batch := c.batch != nil && len(a)+len(b) > 16<<10
	if batch {
		c.batch.begin()
	}
	n, err := c.bufs.WriteTo(c.nc)
	if batch {
		if e := c.batch.end(); err == nil {
			err = e
		}
	}
	c.iov[0], c.iov[1] = nil, nil
	return int(n), err
}

func (c *conn) respond(st wire.Status, stored uint64, err error) {
	c.status = st
	var msg string
	if st != wire.StatusOK && st != wire.StatusNotFound && err != nil {
		msg = err.Error()
		if len(msg) > wire.MaxErrorMessage {
			msg = msg[:wire.MaxErrorMessage]
		}
	}
	c.wbuf = wire.AppendResponse(c.wbuf, &wire.ResponseHeader{Status: st, Stored: stored, BodyLen: uint64(len(msg))})
	c.wbuf = append(c.wbuf, msg...)
}

// handleOne reads one request and queues its response. An error ends the
// connection: a *wire.FrameError is answered first, anything else is an
// I/O failure of the connection itself.
func (c *conn) handleOne() (err error) {
	// A request of another epoch is refused on its first byte: an older
	// generation's frame may be shorter than this prefix, and reading the
	// rest would wait for the body deadline.
	if err := wire.ForeignEpoch(c.peekBuffered()); err != nil {
		c.takeScratch()
		return err
	}
	if err := c.readPrefix(); err != nil {
		return err
	}
	c.takeScratch()
	h, err := wire.DecodeRequest(c.hdr[:], c.s.lim)
	if err != nil {
		c.unread = h.BodyLen
		return err
	}
	c.s.stats.ops[h.Op].Add(1)
	if h.BodyLen > 0 && (c.pastFirst || c.s.opts.FirstRequest == 0) {
		_ = c.nc.SetReadDeadline(c.s.opts.Clock.Now().Add(c.s.opts.BodyTimeout))
		defer c.clearReadDeadline()
	}
	if m := c.s.metrics; m != nil {
		start := time.Now()
		c.status = wire.StatusOK
		defer func() {
			// A request refused with a frame error is answered with its
			// status; one cut short by its connection was not answered.
			if err == nil {
				m.observe(h.Op, c.status, start)
			} else if fe, ok := errors.AsType[*wire.FrameError](err); ok {
				m.observe(h.Op, fe.Status, start)
			}
		}()
	}
	if c.s.opts.Credentials != nil && requiresAuth(h.Op) {
		if err := c.authenticated(); err != nil {
			c.unread = h.BodyLen
			return err
		}
	}
	eng := c.s.opts.Engine
	switch h.Op {
	case wire.OpPing:
		c.respond(wire.StatusOK, 0, nil)
	case wire.OpAuth:
		return c.handleAuth(&h)
	case wire.OpPut:
		if !c.allows(h.Key.Tenant, creds.Write) {
			// The value is read off; the connection stays usable.
			if err := c.discard(int(h.BodyLen)); err != nil {
				return err
			}
			err := c.errForbidden(creds.Write, h.Key.Tenant)
			c.respond(wire.StatusForbidden, 0, err)
			break
		}
		if c.blindOver(h.Key.Tenant, h.BodyLen, false) {
			if err := c.discard(int(h.BodyLen)); err != nil {
				return err
			}
			err := errBlindQuota(h.Key.Tenant)
			c.respond(wire.StatusOf(err), 0, err)
			break
		}
		if r := c.s.receiver; r != nil {
			if dst, loan, ok := r.Receive(h.Key, h.BodyLen); ok {
				if err := c.readFull(dst); err != nil {
					r.AbortReceive(loan)
					return err
				}
				err := c.blindQuota(h.Key.Tenant, r.CommitReceive(h.Key, dst, loan))
				c.respond(wire.StatusOf(err), 0, err)
				break
			}
		}
		if !c.takeBudget(int64(iobuf.SizeFor(int(h.BodyLen)))) {
			// The value is read off without a buffer; the connection
			// stays usable.
			if err := c.discard(int(h.BodyLen)); err != nil {
				return err
			}
			err := c.errBusy(c.s.opts.BodyTimeout)
			c.respond(wire.StatusOf(err), 0, err)
			break
		}
		buf := c.s.pool.Get(int(h.BodyLen))
		if err := c.readBody(buf.B); err != nil {
			c.s.pool.Put(buf)
			c.dropBudget()
			return err
		}
		err := c.blindQuota(h.Key.Tenant, eng.Put(h.Key, buf.B))
		c.s.pool.Put(buf)
		c.dropBudget()
		c.respond(wire.StatusOf(err), 0, err)
	case wire.OpGet:
		if !c.allows(h.Key.Tenant, creds.Read) {
			c.respond(wire.StatusForbidden, 0, c.errForbidden(creds.Read, h.Key.Tenant))
			break
		}
		data, stored, err := c.read(h.Key, h.Offset, h.Length)
		c.s.pins.read(h.Key) // after the read took its own pin
		if err != nil {
			c.release()
			c.respond(wire.StatusOf(err), stored, err)
			return nil
		}
		c.wbuf = wire.AppendResponse(c.wbuf, &wire.ResponseHeader{Status: wire.StatusOK, Stored: stored, BodyLen: uint64(len(data))})
		err = c.writePayload(data)
		c.release()
		return err
	case wire.OpExist:
		if !c.allows(h.Key.Tenant, creds.Read) {
			c.respond(wire.StatusForbidden, 0, c.errForbidden(creds.Read, h.Key.Tenant))
			break
		}
		stored, err := eng.Exist(h.Key)
		c.respond(wire.StatusOf(err), stored, err)
	case wire.OpRemove:
		if !c.allows(h.Key.Tenant, creds.Remove) {
			c.respond(wire.StatusForbidden, 0, c.errForbidden(creds.Remove, h.Key.Tenant))
			break
		}
		err := c.blindRemove(h.Key.Tenant, eng.Remove(h.Key))
		c.respond(wire.StatusOf(err), 0, err)
	case wire.OpStats:
		if c.s.opts.Credentials != nil && !c.auth.grant.Has(creds.Stats) {
			c.s.forbid(c, "(stats)", creds.Stats)
			c.respond(wire.StatusForbidden, 0, c.errForbidden(creds.Stats, 0))
			break
		}
		reply := c.s.statsReply()
		if c.s.opts.Credentials != nil && !c.auth.grant.AllTenants(creds.Stats) {
			reply = c.s.scopedStats(c.auth.grant)
		}
		body, _ := json.Marshal(reply)
		c.wbuf = wire.AppendResponse(c.wbuf, &wire.ResponseHeader{Status: wire.StatusOK, BodyLen: uint64(len(body))})
		c.wbuf = append(c.wbuf, body...)
	case wire.OpBatchPut:
		return c.batchPut(&h)
	case wire.OpBatchGet:
		return c.batchGet(&h)
	case wire.OpBatchExist, wire.OpBatchRemove:
		return c.batchKeys(&h)
	case wire.OpShmInfo:
		c.shmInfo()
	case wire.OpLeaseGet, wire.OpRelease, wire.OpLeasePut:
		if err := c.leaseOp(&h); err != nil {
			return err
		}
	}
	if len(c.wbuf) >= flushAt {
		return c.flush()
	}
	return nil
}

// readTable reads a batch item table of n bytes into reused scratch.
func (c *conn) readTable(n int) ([]byte, error) {
	c.takeTables()
	if err := c.awaitClient(n); err != nil {
		return nil, err
	}
	// A table larger than any before on this connection grows as it
	// arrives (wire.ReadGrowing): it is not payload budget, and a header
	// alone must not make the node set its size aside.
	t, err := wire.ReadGrowing(c.br, c.table, n)
	c.table = t[:0]
	c.takeScratch()
	return t, err
}

func (c *conn) statuses(n int) []byte {
	c.takeTables()
	if cap(c.stat) < n {
		c.stat = make([]byte, n)
	}
	return c.stat[:n]
}

// batchPut reads values in chunks whose sum stays within MaxBlockBytes (at
// least one value per chunk), so one frame never makes the node hold more
// than about one maximum block, and stores each chunk with PutBatch so
// a group writes its disks concurrently.
func (c *conn) batchPut(h *wire.RequestHeader) error {
	n := int(h.Length)
	table, err := c.readTable(n * wire.BatchPutItemLen)
	if err != nil {
		return err
	}
	if err := wire.ValidateBatchPutTable(table, h.BodyLen, c.s.lim); err != nil {
		c.unread = h.BodyLen - uint64(len(table))
		return err
	}
	st := c.statuses(n)
	clear(c.blindRun) // a frame that ended on a refused item may have left some
	// Items are stored in runs, in order: values the engine received into
	// its own memory (RAM tier) are committed together, values read into
	// pooled buffers are stored together; a run ends when the other kind
	// of item comes next, and holds at most max_block_bytes (of buffers or
	// of reserved RAM-tier slots) before it is stored.
	var runBytes uint64
	start := 0
	store := func(end int) {
		if len(c.keys) == 0 {
			return
		}
		if cap(c.errs) < len(c.keys) {
			c.errs = make([]error, len(c.keys))
		}
		errs := c.errs[:len(c.keys)]
		if len(c.loans) > 0 {
			c.s.receiver.CommitReceiveBatch(c.keys, c.vals, c.loans, errs)
		} else {
			c.s.opts.Engine.PutBatch(c.keys, c.vals, errs)
		}
		for i, e := range errs {
			st[start+i] = byte(wire.StatusOf(e))
			errs[i] = nil
		}
		c.dropRun(false)
		clear(c.blindRun) // the run landed: its bytes are in the quota's use now
		runBytes = 0
		start = end
	}
	for i := 0; i < n; i++ {
		k, vl := wire.DecodePutItem(table[i*wire.BatchPutItemLen:])
		if vl > c.s.lim.MaxBlockBytes {
			// This item's answer, not the batch's: the others are stored.
			// Its bytes are read off (the frame's bound, checked with its
			// prefix, bounds them) and dropped.
			store(i)
			if err := c.discard(int(vl)); err != nil {
				return err
			}
			st[i] = byte(wire.StatusTooLarge)
			start = i + 1
			continue
		}
		if !c.allows(k.Tenant, creds.Write) {
			store(i) // as for TOO_LARGE: this item's answer, its bytes dropped
			if err := c.discard(int(vl)); err != nil {
				return err
			}
			st[i] = byte(wire.StatusForbidden)
			start = i + 1
			continue
		}
		if c.blindOver(k.Tenant, vl, true) {
			store(i)
			if err := c.discard(int(vl)); err != nil {
				return err
			}
			st[i] = byte(wire.StatusQuotaExceeded)
			start = i + 1
			continue
		}
		if runBytes > 0 && runBytes+vl > c.s.lim.MaxBlockBytes {
			store(i) // before this item reserves anything: the bound holds
		}
		var dst []byte
		var loan engine.Loan
		received := false
		if r := c.s.receiver; r != nil {
			dst, loan, received = r.Receive(k, vl)
		}
		if len(c.keys) > 0 && received != (len(c.loans) > 0) {
			store(i) // the other kind: the run so far lands before this item
		}
		if !received {
			need := int64(iobuf.SizeFor(int(vl)))
			if !c.grab(need) {
				// Store the run so far first: its budget goes back, and
				// a connection never waits while it holds any.
				store(i)
				if !c.takeBudget(need) {
					if err := c.discard(int(vl)); err != nil {
						return err
					}
					st[i] = byte(wire.StatusUnavailable)
					start = i + 1
					continue
				}
			}
			buf := c.s.pool.Get(int(vl))
			c.held = append(c.held, buf)
			dst = buf.B
		} else {
			c.loans = append(c.loans, loan)
		}
		c.keys = append(c.keys, k)
		c.vals = append(c.vals, dst)
		c.blindJoin(k.Tenant, vl)
		runBytes += vl
		if err := c.readBody(dst); err != nil {
			// A stall or a client gone: the run so far is dropped, runs
			// stored before it stay, and no answer goes out (the package
			// doc's Bounds; TestStalledBatchPutKeepsOnlyStoredRuns).
			c.dropRun(true)
			return err
		}
	}
	store(n)
	c.wbuf = wire.AppendResponse(c.wbuf, &wire.ResponseHeader{Status: wire.StatusOK, Stored: uint64(n)})
	c.wbuf = append(c.wbuf, st...)
	return nil
}

// dropRun forgets the pending BATCH_PUT run: pooled buffers go back, and
// slots the engine reserved are given back when abort is set (the values
// never arrived) or were committed already.
func (c *conn) dropRun(abort bool) {
	for i, b := range c.held {
		c.s.pool.Put(b)
		c.held[i] = nil
	}
	if abort {
		for _, l := range c.loans {
			c.s.receiver.AbortReceive(l)
		}
	}
	c.dropBudget()
	clear(c.vals) // no reference to pooled buffers or arena slots outlives the run
	c.held, c.keys, c.vals, c.loans = c.held[:0], c.keys[:0], c.vals[:0], c.loans[:0]
}

func (c *conn) batchGet(h *wire.RequestHeader) error {
	n := int(h.Length)
	table, err := c.readTable(n * wire.BatchGetItemLen)
	if err != nil {
		return err
	}
	c.wbuf = wire.AppendResponse(c.wbuf, &wire.ResponseHeader{Status: wire.StatusOK, Stored: uint64(n)})
	for i := 0; i < n; i++ {
		k, off, length := wire.DecodeGetItem(table[i*wire.BatchGetItemLen:])
		if !c.allows(k.Tenant, creds.Read) {
			c.wbuf = wire.AppendGetRecord(c.wbuf, wire.StatusForbidden, 0, 0)
			continue
		}
		data, stored, err := c.read(k, off, length)
		c.s.pins.read(k)
		if err != nil {
			c.release()
			c.wbuf = wire.AppendGetRecord(c.wbuf, wire.StatusOf(err), stored, 0)
			continue
		}
		c.wbuf = wire.AppendGetRecord(c.wbuf, wire.StatusOK, stored, uint64(len(data)))
		err = c.writePayload(data)
		c.release()
		if err != nil {
			return err
		}
	}
	return nil
}

func (c *conn) batchKeys(h *wire.RequestHeader) error {
	n := int(h.Length)
	table, err := c.readTable(n * wire.BatchKeyItemLen)
	if err != nil {
		return err
	}
	c.wbuf = wire.AppendResponse(c.wbuf, &wire.ResponseHeader{Status: wire.StatusOK, Stored: uint64(n)})
	eng := c.s.opts.Engine
	if h.Op == wire.OpBatchExist {
		return c.existBatch(table, n, h.Offset == wire.ExistFlagPin)
	}
	for i := 0; i < n; i++ {
		k := wire.DecodeKeyItem(table[i*wire.BatchKeyItemLen:])
		if !c.allows(k.Tenant, creds.Remove) {
			c.wbuf = append(c.wbuf, byte(wire.StatusForbidden))
		} else {
			c.wbuf = append(c.wbuf, byte(wire.StatusOf(c.blindRemove(k.Tenant, eng.Remove(k)))))
		}
		if len(c.wbuf) >= flushAt {
			if err := c.flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// firstPinOf reports whether key is pinned for the first time in the
// BATCH_EXIST being answered: a key named again in the same request is
// not pinned again, so one frame repeating a key cannot take the node's
// whole pin table.
func (c *conn) firstPinOf(key wire.BlockKey) bool {
	if c.pinnedNow == nil {
		c.pinnedNow = make(map[wire.BlockKey]struct{})
	}
	if _, again := c.pinnedNow[key]; again {
		return false
	}
	c.pinnedNow[key] = struct{}{}
	return true
}

// forgetPins empties firstPinOf's set after a request; a large one is
// dropped rather than kept for the connection's life.
func (c *conn) forgetPins() {
	if len(c.pinnedNow) > 1024 {
		c.pinnedNow = nil
		return
	}
	clear(c.pinnedNow)
}

// existBatch answers a BATCH_EXIST with engine.ExistBatch: an engine that
// looks keys up together (the object-store tier reads the ones its disks
// lack in parallel) gets them together, any other one key at a time. The
// keys and answers live in slices the connection keeps.
func (c *conn) existBatch(table []byte, n int, pin bool) error {
	if cap(c.existKeys) < n {
		c.existKeys, c.existStored, c.existErrs = make([]wire.BlockKey, n), make([]uint64, n), make([]error, n)
	}
	keys, stored, errs := c.existKeys[:n], c.existStored[:n], c.existErrs[:n]
	// With credentials, keys of tenants the grant does not cover are not
	// looked up: idx holds the request position of each key that is.
	var idx []int32
	if c.s.opts.Credentials != nil {
		if cap(c.existIdx) < n {
			c.existIdx = make([]int32, n)
		}
		idx = c.existIdx[:0]
	}
	m := 0
	for i := 0; i < n; i++ {
		k := wire.DecodeKeyItem(table[i*wire.BatchKeyItemLen:])
		if idx != nil {
			if !c.allows(k.Tenant, creds.Read) {
				continue
			}
			idx = append(idx, int32(i))
		}
		keys[m] = k
		m++
	}
	engine.ExistBatch(c.s.opts.Engine, keys[:m], stored[:m], errs[:m])
	if pin {
		defer c.forgetPins()
	}
	j := 0 // the next looked-up key
	for i := 0; i < n; i++ {
		if idx != nil && (j == len(idx) || idx[j] != int32(i)) {
			c.wbuf = wire.AppendExistRecord(c.wbuf, wire.StatusForbidden, 0)
		} else {
			if errs[j] == nil && pin && c.s.pins != nil && c.firstPinOf(keys[j]) {
				c.s.pins.pin(keys[j])
			}
			c.wbuf = wire.AppendExistRecord(c.wbuf, wire.StatusOf(errs[j]), stored[j])
			errs[j] = nil // hold no error past the request
			j++
		}
		if len(c.wbuf) >= flushAt {
			if err := c.flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// shortFirstPrefix refuses a connection whose first request's prefix
// stopped short and went quiet for wire.ShortPrefixGap: a peer of a
// generation with shorter frames, answered at once rather than after the
// first-request deadline. It leaves the read deadline as it found it.
func (c *conn) shortFirstPrefix() error {
	_ = c.nc.SetReadDeadline(c.s.opts.Clock.Now().Add(wire.ShortPrefixGap))
	_, err := c.br.Peek(len(c.hdr))
	if err != nil && isTimeout(err) && !c.isStopped() {
		return wire.ShortPrefix(c.br.Buffered(), len(c.hdr), "this node's data port")
	}
	if d := c.s.opts.FirstRequest; d > 0 {
		_ = c.nc.SetReadDeadline(c.firstDeadline)
	} else {
		_ = c.nc.SetReadDeadline(time.Time{})
	}
	return nil
}

// peekBuffered is what has arrived of the next request, without
// consuming it (at least one byte: the caller's Peek saw it).
func (c *conn) peekBuffered() []byte {
	b, _ := c.br.Peek(min(c.br.Buffered(), wire.RequestPrefixLen))
	return b
}
