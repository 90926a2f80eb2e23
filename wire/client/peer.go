package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dfkv/dfkv/wire"
	"github.com/dfkv/dfkv/wire/deadline"
)

// peer is one node: its address and a pool of idle connections.
type peer struct {
	addr string
	opts *Options

	mu   sync.Mutex
	idle []*cconn
	busy map[*cconn]struct{} // connections with a call in flight, for cut
	done bool

	shm     shmPeer                // its shared-memory socket, when it is on this host (shm.go)
	rdma    rdmaPeer               // its RDMA connections, with Options.RDMA (rdma.go)
	brk     breaker                // whether calls may go to the node now
	lastErr atomic.Pointer[string] // why the last failed exchange failed

	// Stall detection (stalled, Client.watch): len(busy); heard, the last
	// time the node was heard from (a response began, a progressPiece of
	// response bytes arrived, a liveness probe was answered; or the moment
	// it went from idle to busy); and unanswered, set when a probe went
	// unanswered and cleared when the node is heard from again. Request
	// bytes a node takes never count: the socket buffers take megabytes of
	// a request from a node that has stopped.
	inflight   atomic.Int32
	heard      atomic.Int64 // monoNanos
	unanswered atomic.Bool
	probing    atomic.Bool // a liveness probe (Client.watch) is out
}

// minStall is the least stallAfter: a node is never judged stalled on
// less silence than this, whatever the Timeout.
const minStall = 250 * time.Millisecond

// stallAfter is how long a node may stay silent with calls in flight
// before it is probed: a quarter of the call Timeout, at least minStall.
func (p *peer) stallAfter() time.Duration { return stallAfterFor(p.opts.Timeout) }

func stallAfterFor(timeout time.Duration) time.Duration { return max(timeout/4, minStall) }

// stalled reports a node that has calls in flight and left the last
// liveness probe unanswered: paused (SIGSTOP, a long GC) or black-holed by
// the network. Its connections are open, so only the calls' deadlines
// would notice, and until the first of those passes (a whole Timeout)
// every call to it joins the wait, until all of a client's workers block
// on the one node and its throughput to the healthy ones drops to zero.
// New calls to a stalled node fail at once instead (reads as misses), and
// the watchdog cuts the calls in flight (cutSilent). With nothing in
// flight a call goes through (after any back-off window), and is how the
// node is heard from again.
func (p *peer) stalled(now time.Time) (silent time.Duration, yes bool) {
	if p.inflight.Load() == 0 || !p.unanswered.Load() {
		return 0, false
	}
	return time.Duration(monoNanos(now) - p.heard.Load()), true
}

// silent reports a node with calls in flight that it has not been heard
// from for stallAfter, however much request data it took meanwhile: the
// watchdog then probes it, and cuts those of its calls that have not
// moved either if it does not answer (cutSilent).
func (p *peer) silent(now time.Time) (silent time.Duration, yes bool) {
	if p.inflight.Load() == 0 {
		return 0, false
	}
	silent = time.Duration(monoNanos(now) - p.heard.Load())
	return silent, silent > p.stallAfter()
}

// standing reports whether a call in flight on p has moved nothing for
// stallAfter: the calls cutSilent would cut.
func (p *peer) standing(now time.Time) bool {
	since := p.standingSince(now)
	p.mu.Lock()
	defer p.mu.Unlock()
	for cc := range p.busy {
		if cc.progress.Load() <= since {
			return true
		}
	}
	return false
}

// standingSince is the progress time at or before which a call counts
// as standing.
func (p *peer) standingSince(now time.Time) int64 { return monoNanos(now) - int64(p.stallAfter()) }

// cutSilent ends the calls in flight on a silent node whose own
// connections have moved nothing for stallAfter either: their deadline
// moves into the past, so each fails now, as a timeout, and is closed. A
// call still moving a large value (a slow link, a node reading a long PUT
// at its pace) is left to run; one whose request the socket buffers took
// and that then stood still is cut like any other, so a stopped node is
// found whatever new calls keep arriving. The watchdog cuts only after
// the node failed a liveness probe (probe).
func (p *peer) cutSilent(now time.Time, silent time.Duration) {
	since := p.standingSince(now)
	p.mu.Lock()
	n := 0
	for cc := range p.busy {
		if cc.progress.Load() > since {
			continue
		}
		cc.cut.Store(true)
		_ = cc.nc.SetDeadline(time.Unix(1, 0))
		n++
	}
	p.mu.Unlock()
	if n > 0 {
		p.opts.Logger.Warn("client: node stopped answering; failing its calls in flight", "node", p.addr, "calls", n, "silent_for", silent.Round(time.Millisecond).String())
	}
}

// probeWait is how long a liveness probe waits for its answer: half of
// stallAfter, so a stopped node is cut within 1.5 stallAfter of its last
// sign.
func (p *peer) probeWait() time.Duration { return p.stallAfter() / 2 }

// probe asks a silent node whether it is alive: a PING on a connection of
// its own, answered within probeWait. Silence alone does not tell a
// stopped node from one that is busy with what the calls asked (a PUT
// waiting for buffer budget or a slow disk while another call streams a
// long body to it): those calls move nothing and hear nothing, and
// cutting them would fail a healthy node's calls and back it off. A node
// that answers, with any status, is alive, and counts as heard from.
func (p *peer) probe() bool {
	wait := p.probeWait()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	nc, err := p.opts.Dialer.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return false
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(wait))
	if _, err := nc.Write(wire.AppendRequest(nil, &wire.RequestHeader{Op: wire.OpPing})); err != nil {
		return false
	}
	var b [wire.ResponsePrefixLen]byte
	if _, err := io.ReadFull(nc, b[:]); err != nil {
		return false
	}
	if _, err := wire.DecodeResponse(b[:]); err != nil {
		return false
	}
	p.heard.Store(monoNanos(time.Now()))
	p.unanswered.Store(false)
	return true
}

// track and untrack keep busy (the connections cutSilent may end) and
// inflight (its size, for stalled to read without the lock). A call starts
// its connection's progress; a node going from idle to busy starts its
// silence now.
func (p *peer) track(cc *cconn) {
	now := monoNanos(time.Now())
	cc.progress.Store(now)
	cc.sentSince, cc.readSince = 0, 0
	p.mu.Lock()
	if p.busy == nil {
		p.busy = make(map[*cconn]struct{})
	}
	p.busy[cc] = struct{}{}
	if len(p.busy) == 1 {
		p.heard.Store(now)
	}
	p.inflight.Store(int32(len(p.busy)))
	p.mu.Unlock()
}

func (p *peer) untrack(cc *cconn) {
	p.mu.Lock()
	delete(p.busy, cc)
	p.inflight.Store(int32(len(p.busy)))
	p.mu.Unlock()
}

// admit decides whether a call may use the node now: the breaker's
// allow, with the hold a trial call gets. The hold lasts until the call's
// deadline (at most one Timeout away) plus minBackoff: a trial that times
// out reports its failure just after its deadline, and must still find
// its hold to count it; were the hold gone, a second trial would start
// and the window would never grow. trial is 0 for any other call; pass it
// to fail and release. A closed breaker costs one atomic load: the hold
// is worked out only when the breaker is not.
func (p *peer) admit(now, deadline time.Time) (ok bool, trial int64) {
	if p.brk.closed() {
		return true, 0
	}
	return p.brk.allow(now, minTime(deadline, now.Add(max(p.opts.Timeout, minBackoff))).Add(minBackoff))
}

// monoEpoch anchors monoNanos.
var monoEpoch = time.Now()

// monoOffset keeps monoNanos positive for any time within a century and
// more of monoEpoch: the breaker's encoding (0 closed, even an open
// window's end) needs positive times, and a clock may start before the
// process did (a simulation's virtual clock starts in the year 2000).
const monoOffset = 1 << 62

// monoNanos is t on the monotonic clock, as nanoseconds since monoEpoch
// plus monoOffset (t from time.Now carries a monotonic reading): a
// back-off window must not grow or shrink when the wall clock is stepped.
func monoNanos(t time.Time) int64 { return int64(t.Sub(monoEpoch)) + monoOffset }

// lastFailure says why the node's last failed exchange failed, for the
// errors of the calls its back-off window refuses: "backing off" alone
// does not tell an operator whether the node refused, timed out or was
// never resolved.
func (p *peer) lastFailure() string {
	if e := p.lastErr.Load(); e != nil {
		return *e
	}
	return "no cause recorded"
}

// fail records a connection failure (err, its cause) of a call that was
// the breaker's trial (trial, from admit) or not (0), and logs the
// breaker's first opening of an incident series.
func (p *peer) fail(now time.Time, trial int64, err error) {
	if err != nil {
		msg := err.Error()
		p.lastErr.Store(&msg)
	}
	if opened, n, window := p.brk.fail(now, trial); opened && n == 1 {
		p.opts.Logger.Warn("client: node unreachable; backing off", "node", p.addr, "backoff", window.String())
	}
}

// release ends a trial that reached no verdict (breaker.release).
func (p *peer) release(trial int64) { p.brk.release(trial) }

// succeed closes the breaker after a good exchange.
func (p *peer) succeed() {
	if p.brk.succeed() {
		p.opts.Logger.Info("client: node reachable again", "node", p.addr)
	}
}

func newPeer(addr string, opts *Options) *peer { return &peer{addr: addr, opts: opts} }

// get returns an idle connection or dials a new one. reused tells the
// caller whether the connection came from the pool.
func (p *peer) get(ctx context.Context, deadline time.Time) (cc *cconn, reused bool, err error) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		cc = p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return cc, true, nil
	}
	p.mu.Unlock()
	cc, err = p.dial(ctx, deadline)
	return cc, false, err
}

// dial connects to the node: over shared memory when the node is on this
// host and offers it (shm.go), over TCP otherwise.
func (p *peer) dial(ctx context.Context, deadline time.Time) (*cconn, error) {
	if p.opts.SharedMemory == ShmOff {
		return p.dialTCP(ctx, deadline)
	}
	return p.dialShm(ctx, deadline)
}

func (p *peer) dialTCP(ctx context.Context, deadline time.Time) (*cconn, error) {
	dctx, cancel := context.WithDeadline(ctx, minTime(deadline, time.Now().Add(p.opts.DialTimeout)))
	defer cancel()
	nc, err := p.opts.Dialer.DialContext(dctx, "tcp", p.addr)
	if errors.Is(err, ErrAuth) {
		return nil, fmt.Errorf("connect to dfkv node %s: %w", p.addr, err)
	}
	if err != nil {
		return nil, fmt.Errorf("connect to dfkv node %s: %v: %w", p.addr, err, wire.StatusUnavailable)
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	cc := &cconn{p: p, nc: nc, br: bufio.NewReaderSize(nc, 64<<10)}
	if p.opts.Token != "" {
		if err := cc.authenticate(p.opts.Token, minTime(deadline, time.Now().Add(p.opts.DialTimeout))); err != nil {
			_ = nc.Close()
			return nil, err
		}
	}
	return cc, nil
}

// ErrAuth is wrapped by the error of a call whose connection could not
// authenticate: the node refused the token or cannot check one, or the
// TLS handshake failed on certificates (or found no TLS).
var ErrAuth = errors.New("dfkv authentication failed")

// authenticate presents the client's token on a new connection (AUTH),
// before anything else is sent on it, within the dial's deadline. A node
// without credentials accepts any token. A refused token is an error
// wrapping wire.StatusUnauthenticated, which exchange returns as it is:
// the node is up, the client is misconfigured.
func (cc *cconn) authenticate(token string, by time.Time) error {
	_ = cc.nc.SetDeadline(by)
	defer func() { _ = cc.nc.SetDeadline(time.Time{}) }()
	cc.wbuf = wire.AppendRequest(cc.wbuf[:0], &wire.RequestHeader{Op: wire.OpAuth, BodyLen: uint64(len(token))})
	cc.wbuf = append(cc.wbuf, token...)
	_, err := cc.nc.Write(cc.wbuf)
	clear(cc.wbuf) // the token does not linger in the connection's buffer
	cc.wbuf = cc.wbuf[:0]
	if err == nil {
		_, err = cc.readHeader()
	}
	cc.got, cc.broken = false, false
	if err == nil {
		return nil
	}
	if tlsRefusal(err) {
		return tlsRefused(cc.p.addr, err)
	}
	switch wire.StatusOf(err) {
	case wire.StatusUnauthenticated, wire.StatusInvalid:
		return fmt.Errorf("dfkv node %s refused this client's token (client.token / DFKV_TOKEN): %w: %w", cc.p.addr, ErrAuth, err)
	case wire.StatusUnsupported:
		return fmt.Errorf("dfkv node %s predates credentials (it does not know AUTH) and cannot take this client's token: upgrade the node, or unset client.token: %w: %w", cc.p.addr, ErrAuth, err)
	}
	return connError(cc.p.addr, fmt.Errorf("authenticating: %w", err))
}

// put returns a healthy connection to the pool (or closes it when full).
func (p *peer) put(cc *cconn) {
	p.mu.Lock()
	if !p.done && len(p.idle) < p.opts.PoolSize {
		p.idle = append(p.idle, cc)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	_ = cc.closeConn()
}

// dropIdle closes the idle connections: the node they lead to has
// closed one of them unasked, as a restart does to all of them.
func (p *peer) dropIdle() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, cc := range idle {
		_ = cc.closeConn()
	}
}

func (p *peer) close() {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.done = nil, true
	p.mu.Unlock()
	for _, cc := range idle {
		_ = cc.closeConn()
	}
	p.rdma.close()
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// cconn is one client connection. It is used by one call at a time.
type cconn struct {
	p    *peer // its node, told when it is heard from (cconn.heard)
	nc   net.Conn
	br   *bufio.Reader
	wbuf []byte
	iov  [2][]byte
	bufs net.Buffers
	// vec holds the caller's parts queued for flushv, round the pieces of
	// one vectored write; both are kept for the connection's next call
	// and cleared after each, so they pin no caller memory.
	vec, round [][]byte
	rh         [wire.ResponsePrefixLen]byte
	// got is set once any response byte has been read on this exchange.
	got bool
	// broken is set when the stream is no longer aligned on a frame
	// boundary (an I/O or framing failure); the connection is then closed.
	broken bool
	// deadline is the socket deadline last set (exchange).
	deadline deadline.Lazy
	// lease is the connection's shared-memory state (nil: TCP), and arena
	// the leased bytes of the item being taken, which readFull, readValue
	// and discard then copy instead of reading the stream (shm.go).
	lease *leaseConn
	arena []byte
	// cut is set when peer.cutSilent ended the call in flight (its node
	// stalled); the connection is then broken.
	cut atomic.Bool
	// progress is when this call last moved a progressPiece either way
	// (or began), for cutSilent; sentSince and readSince count the bytes
	// moved since.
	progress             atomic.Int64 // monoNanos
	sentSince, readSince int
}

// progressPiece is the unit of progress of a call's transfer: each one
// moved either way, over one value or many (a batch), renews the call's
// own progress (so the watchdog leaves a slow but moving call alone), and
// each one of response bytes renews the node's (peer.heard). A body
// longer than it is sent in pieces of it so that its progress is seen
// while it moves. A call is then never cut while it moves more than
// progressPiece per stallAfter (0.4 MB/s at the default Timeout), except
// at the end of a PUT, whose last megabytes may sit unseen in socket
// buffers while the node drains them.
const progressPiece = 1 << 20

// sent and read count a call's transfer toward its next progressPiece.
func (cc *cconn) sent(n int) {
	if cc.sentSince += n; cc.sentSince >= progressPiece {
		cc.sentSince = 0
		cc.progress.Store(monoNanos(time.Now()))
	}
}

func (cc *cconn) read(n int) {
	if cc.readSince += n; cc.readSince >= progressPiece {
		cc.readSince = 0
		cc.heard()
	}
}

// heard notes that the node answered on this call: a response began, or a
// progressPiece of one arrived.
func (cc *cconn) heard() {
	now := monoNanos(time.Now())
	cc.progress.Store(now)
	if cc.p != nil {
		cc.p.heard.Store(now)
		cc.p.unanswered.Store(false)
	}
}

// send writes wbuf and then body (if any) with one writev; a body longer
// than progressPiece goes in pieces of it (sent).
func (cc *cconn) send(body []byte) error {
	var err error
	if len(body) == 0 {
		_, err = cc.nc.Write(cc.wbuf)
	} else {
		first := body[:min(len(body), progressPiece)]
		cc.iov[0], cc.iov[1] = cc.wbuf, first
		cc.bufs = cc.iov[:]
		_, err = cc.bufs.WriteTo(cc.nc)
		cc.iov[0], cc.iov[1] = nil, nil
		if err == nil {
			cc.sent(len(first))
		}
		for rest := body[len(first):]; err == nil && len(rest) > 0; {
			piece := rest[:min(len(rest), progressPiece)]
			if _, err = cc.nc.Write(piece); err == nil {
				cc.sent(len(piece))
			}
			rest = rest[len(piece):]
		}
	}
	cc.wbuf = cc.wbuf[:0]
	if err != nil {
		cc.broken = true
		if refused := cc.refusal(err); refused != nil {
			return refused
		}
	}
	return err
}

// refusalWait bounds the read for a refusal after a failed send. A reset
// socket answers a read at once, with the bytes it still holds or with an
// error, so this is only a safety bound; it may outlast the call's
// deadline by as much.
const refusalWait = 100 * time.Millisecond

// refusal returns the answer the node wrote before it closed the
// connection under a request still being sent, or nil when there is none.
// A node refuses a frame it will not take (a PUT over its max_block_bytes)
// once it has read the prefix, answers and closes, so the rest of the send
// may fail with EPIPE or ECONNRESET though the node is up. Linux keeps the
// bytes received before a reset readable, so the answer is read back and
// becomes the call's result: a status error, which exchange does not count
// against the node. With nothing to read the send's error stands. The
// connection is broken either way.
func (cc *cconn) refusal(sendErr error) error {
	if !errors.Is(sendErr, syscall.EPIPE) && !errors.Is(sendErr, syscall.ECONNRESET) {
		return nil
	}
	_ = cc.nc.SetReadDeadline(time.Now().Add(refusalWait))
	_, err := cc.readHeader()
	cc.broken = true
	switch err.(type) {
	case *wire.StatusError, wire.Status:
		return err // a well-formed answer with a status other than OK
	}
	if tlsRefusal(err) {
		return tlsRefused(cc.p.addr, err) // the node refused the client's certificate and closed
	}
	// Nothing readable (EOF, the reset, the deadline), a malformed answer,
	// or an OK, which cannot answer a request not yet sent. The send's
	// error stands, and exchange may retry a pooled connection as before.
	cc.got = false
	return nil
}

// readFull reads exactly len(b) bytes, marking the connection broken on
// failure, and counts them toward the call's progress (read): a value of
// progressPiece or more read by read, so a long one shows its progress
// while it arrives.
func (cc *cconn) readFull(b []byte) error {
	if cc.arena != nil {
		return cc.takeArena(b)
	}
	if len(b) < progressPiece {
		if _, err := io.ReadFull(cc.br, b); err != nil {
			cc.broken = true
			return err
		}
		cc.read(len(b))
		return nil
	}
	return cc.readFrom(cc.br, b)
}

// readFrom fills b from r read by read, counting each toward the call's
// progress (read), and marks the connection broken on failure.
func (cc *cconn) readFrom(r io.Reader, b []byte) error {
	for len(b) > 0 {
		n, err := r.Read(b)
		if n > 0 {
			cc.read(n)
			b = b[n:]
		}
		if err != nil && len(b) > 0 {
			cc.broken = true
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}

// readHeader reads a response prefix. A non-OK status's message body is
// read and returned as a *wire.StatusError (NOT_FOUND as the bare status,
// which is the common, allocation-free miss).
func (cc *cconn) readHeader() (wire.ResponseHeader, error) { return cc.readHeaderFor(0) }

// directReadMin is the smallest expected value for which readHeaderFor
// reads the response prefix straight from the socket: half the bufio
// buffer, past which a buffered read would mostly copy value bytes.
const directReadMin = 32 << 10

// readHeaderFor is readHeader for a response expected to carry about
// expect value bytes. A large one, with nothing buffered, has its prefix
// read on its own from the socket, so the value after it goes straight
// into the caller's buffer instead of being read into the bufio buffer and
// copied out again. Small ones keep the buffered read: prefix and value in
// one syscall. The prefix is read as its first byte and then the rest, as
// the buffered path does: a single 18-byte read is markedly slower for
// large GETs in BenchmarkWirePath, for reasons not yet understood.
func (cc *cconn) readHeaderFor(expect uint64) (wire.ResponseHeader, error) {
	src := io.Reader(cc.br)
	if expect >= directReadMin && cc.br.Buffered() == 0 {
		src = cc.nc
	}
	if _, err := io.ReadFull(src, cc.rh[:1]); err != nil {
		cc.broken = true
		return wire.ResponseHeader{}, err
	}
	cc.got = true
	cc.heard()
	if _, err := io.ReadFull(src, cc.rh[1:]); err != nil {
		cc.broken = true
		return wire.ResponseHeader{}, err
	}
	h, err := wire.DecodeResponse(cc.rh[:])
	if err != nil {
		cc.broken = true
		return h, err
	}
	if h.Status == wire.StatusOK {
		return h, nil
	}
	if h.Status == wire.StatusUnauthenticated {
		cc.broken = true // the node closes the connection after it
	}
	if h.BodyLen > wire.MaxErrorMessage {
		cc.broken = true
		return h, fmt.Errorf("node sent a %d-byte error message (max %d): %w", h.BodyLen, wire.MaxErrorMessage, wire.StatusInvalid)
	}
	if h.BodyLen == 0 {
		return h, h.Status
	}
	msg := make([]byte, h.BodyLen)
	if err := cc.readFull(msg); err != nil {
		return h, err
	}
	return h, &wire.StatusError{Status: h.Status, Message: string(msg)}
}

// discard skips n body bytes the caller has no room for, in pieces that
// count toward the call's progress (read).
func (cc *cconn) discard(n uint64) error {
	if cc.arena != nil {
		cc.arena = cc.arena[min(n, uint64(len(cc.arena))):]
		return nil
	}
	for n > 0 {
		piece := min(n, progressPiece)
		if _, err := cc.br.Discard(int(piece)); err != nil {
			cc.broken = true
			return err
		}
		cc.read(int(piece))
		n -= piece
	}
	return nil
}

// connError turns an I/O failure of a connection into a status error. It
// wraps the cause as well as the status, so a caller can tell its own
// cancellation (errors.Is(err, context.Canceled)) from a node that failed.
func connError(addr string, err error) error {
	var st wire.Status
	if errors.As(err, &st) {
		return fmt.Errorf("dfkv node %s: %w", addr, err)
	}
	if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("dfkv node %s: %w: %w", addr, err, wire.StatusTimeout)
	}
	return fmt.Errorf("dfkv node %s: %w: %w", addr, err, wire.StatusUnavailable)
}
