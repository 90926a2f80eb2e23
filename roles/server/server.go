// Package server is the cache node: it accepts TCP connections, decodes
// wire frames and answers them from a StoreEngine (normally an
// engine.Group over the node's disks). The role's command (command.go)
// wires configuration, engines (engines.go), listeners, the HTTP side
// (http.go) and signals around it, with what is not the node's own in
// subpackages: hostcheck (what the host gives it), quota (the tenant
// quotas file) and register (membership at the MDS).
//
// The listener, the clock and the engine are passed in, so
// tests run several nodes in one process and inject faults.
//
// # Bounds
//
// A node stays up and fair under clients that misbehave:
//
//   - A request's body (a PUT's value, a batch) must arrive within
//     server.body_timeout_ms of its header, or the connection is closed
//     with no answer. A PUT cut so stores nothing. A BATCH_PUT is stored
//     in runs of up to max_block_bytes of values as they arrive: a stall
//     drops the run it cuts, the items of it received in full included,
//     and keeps the runs stored before it. The client learns no status,
//     so it must take none of the batch as stored; a batch of at most
//     max_block_bytes is normally one run and stores nothing. The first
//     request of a connection has server.first_request_ms.
//   - At server.max_conns open connections the node closes the one that
//     has waited longest on its client, if it has waited a second or
//     more, to admit the new one, and refuses the new one only when every
//     connection is busy. A connection holds its working memory (a
//     response buffer of about 272 KiB) only while it serves requests,
//     and not while it waits on its client for a body or batch table it
//     announced: replies pending go out before such a wait.
//   - Payload buffers of all connections together (PUT bodies being
//     received, GET values being sent from disk; the RAM tier's arena is
//     apart) are bounded by server.buffer_budget_bytes. Past it a request
//     waits for a buffer, first come first served, and after its body or
//     write timeout is answered UNAVAILABLE. A reserve of an eighth of the
//     budget (at most 128 MiB) serves requests of up to 256 KiB, so
//     clients that stall large transfers cannot hold up everyone's small
//     ones; and while a request waits, a connection blocked on its client
//     with a buffer in hand for 5 s (not reading its response, not sending
//     its body) is closed and its buffer serves the waiting request.
//   - A malformed frame (wrong epoch, unknown op, a body over
//     max_block_bytes, an inconsistent batch table) is answered with a
//     status and a message and that connection is closed; nothing of it is
//     applied. A PUT over max_block_bytes is read off (within bounds)
//     before the TOO_LARGE answer, so the client sees the status, not a
//     reset.
//   - When accept fails for lack of file descriptors or kernel memory the
//     node keeps serving what it has and retries, 5 ms doubling to 1 s.
//
// Warnings a single client can cause are logged at most once per 10 s
// each, with how many were held back, and counted in metrics.
//
// # Tenants and TLS
//
// With Options.Credentials a connection presents a token (AUTH) before it
// addresses any tenant, and each key is checked against the token's grant
// (auth.go): FORBIDDEN, per request or batch item, says nothing about the
// key. With Options.TLS every connection is a TLS server connection whose
// handshake runs under the first-request deadline, and a response's
// records are gathered into few writes (tlsbatch.go). The files behind
// both are reread while the node runs (command.go, keepReading).
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/engine/iobuf"
	"github.com/dfkv/dfkv/engine/objtier"
	"github.com/dfkv/dfkv/rdma"
	"github.com/dfkv/dfkv/roles/internal/accept"
	"github.com/dfkv/dfkv/roles/internal/creds"
	"github.com/dfkv/dfkv/roles/server/internal/ratelog"
	"github.com/dfkv/dfkv/wire"
	"github.com/dfkv/dfkv/wire/deadline"
)

// Options configure a Server. Engine and Listener are required.
type Options struct {
	Engine   engine.StoreEngine
	Listener net.Listener
	Logger   *slog.Logger
	Clock    engine.Clock

	MaxBlockBytes uint64
	MaxBatchItems int
	MaxConns      int
	// FirstRequest is how long a new connection has to deliver its first
	// complete frame (DFKV_SERVER_FIRST_REQUEST_MS); 0 disables the deadline.
	FirstRequest time.Duration
	// ShutdownTimeout bounds how long Serve waits, after its context ends,
	// for in-flight requests before closing their connections.
	ShutdownTimeout time.Duration
	// WriteTimeout bounds one flush to a client that stopped reading.
	WriteTimeout time.Duration
	// BodyTimeout bounds how long a request's body (a PUT's value, a
	// batch's table and values) may take once its header has arrived, so a
	// client that stalls mid-payload cannot hold a reserved RAM-tier slot
	// or a pooled buffer for long. The first request is bounded by
	// FirstRequest instead, when that is set.
	BodyTimeout time.Duration
	// SocketBuffer sets SO_SNDBUF and SO_RCVBUF of each connection; 0
	// keeps the kernel's autotuning.
	SocketBuffer int
	// BufferBudget bounds the payload buffer bytes all connections hold
	// at once (payloadBudget); 0 is max(1 GiB, two buffers for the largest
	// value). New refuses one smaller than the buffer for the largest value.
	BufferBudget uint64
	// StalledCut is how long a connection may be blocked on its client
	// (writing a response it does not read, reading a body it does not
	// send) with payload budget in hand before a request waiting for that
	// budget has it closed (stalled.go); 0 is 5 s.
	StalledCut time.Duration

	// LeaseTTL and LeaseMax bound the pins BATCH_EXIST takes with its pin
	// flag (pins.go): how long one lives unless a GET of its key ends it,
	// and how many may be live. 0: no pins (the flag is accepted and
	// pins nothing).
	LeaseTTL time.Duration
	LeaseMax int

	// RDMA serves the lease protocol over RDMA to clients whose first
	// byte on the data port is the lease epoch (rdma.go); nil: off.
	RDMA *rdma.Node

	// Shm serves the lease protocol on a Unix socket for clients on the
	// node's host (shm.go); nil: off.
	Shm *ShmOptions

	// Credentials, when set, makes every connection authenticate with a
	// token before it addresses any tenant, and confines it to what the
	// token's grant allows (auth.go). Nil: any client may address every
	// tenant. It excludes Shm and RDMA: a one-sided reader maps the whole
	// RAM arena, which no grant can confine to its tenants.
	Credentials *creds.Watch[creds.Tenants]

	// TLS, when set, serves the data port over TLS with this
	// configuration (its GetConfigForClient may swap certificates while
	// the node runs). With a client CA, a verified client certificate's
	// common name may stand in for a token (Credentials).
	TLS *tls.Config

	// lingerTime overrides the linger's time bound (conn.linger) in
	// tests; 0 is the lingerTime default.
	lingerTime time.Duration
}

// Server serves one node's engine over TCP.
type Server struct {
	opts Options
	lim  wire.Limits
	log  *slog.Logger
	// writeSlack is how much earlier than WriteTimeout from now a
	// connection's write deadline may be and still be kept (armWrite).
	writeSlack time.Duration
	pool       *iobuf.Pool
	budget     *payloadBudget
	// stop ends when shutdown begins: a request waiting for budget gives up.
	stop    context.Context
	stopNow context.CancelFunc
	// epoch is when the server was made: connections keep instants as
	// offsets from it in atomics (conn.blockedAt).
	epoch time.Time
	// lastStallScan is when cutStalled last walked the connections, as
	// an offset from epoch plus one; 0 before the first.
	lastStallScan atomic.Int64
	// lender is the engine when it can lend resident bytes in place (the
	// RAM tier): GETs then write from its memory with no copy.
	lender engine.Lender
	// receiver is the engine when it can take PUT payloads straight into
	// its memory (the RAM tier): the socket is read into it, no copy.
	receiver engine.Receiver

	draining atomic.Bool // left the MDS after SIGTERM, still serving (SetDraining)

	mu       sync.Mutex
	conns    map[*conn]struct{}
	closing  bool
	inflight sync.WaitGroup
	// tlsRefusing bounds the TLS handshakes run only to say "full".
	tlsRefusing chan struct{}

	stats counters
	// Per-connection warnings a flood of bad connections could repeat,
	// logged at most once per ratelog.DefaultEvery each (the counters
	// count all).
	firstReqWarn, frameWarn, bodyStallWarn, acceptWarn, refusedWarn, idleCutWarn, authWarn, forbidWarn, tlsWarn, stalledCutWarn ratelog.Limiter
	auth                                                                                                                        authCounters
	cutting                                                                                                                     int           // connections closeIdlest closed that have not ended yet (under mu)
	metrics                                                                                                                     *Metrics      // nil = not exported
	info                                                                                                                        NodeInfo      // reported by STATS
	group                                                                                                                       *engine.Group // the disks, for per-disk STATS when Engine is a tier in front of them
	obj                                                                                                                         *objtier.Tier // the object-store tier, for its STATS; nil without it
	shm                                                                                                                         *shmNode      // the shared-memory transport, or nil
	pins                                                                                                                        *pinSet       // values BATCH_EXIST pinned; nil without a pinning engine or LeaseTTL
}

// counters are the server's own numbers; engine numbers come from Stats().
type counters struct {
	conns            atomic.Int64
	serving          atomic.Int64 // connections holding working memory to serve requests (conn.takeScratch)
	accepted         atomic.Uint64
	refused          atomic.Uint64
	idleClosed       atomic.Uint64
	stalledCut       atomic.Uint64 // connections cutStalled closed
	acceptErrors     atomic.Uint64
	firstReqTimeouts atomic.Uint64
	frameErrors      atomic.Uint64
	tlsFailures      atomic.Uint64 // TLS handshakes that failed (plaintext clients, bad certificates)
	bytesIn          atomic.Uint64
	bytesOut         atomic.Uint64
	ops              [wire.LastOp + 1]atomic.Uint64
}

// New validates opts and returns a Server ready to Serve.
// MaxBatchItemsLimit is the most items Options.MaxBatchItems may allow in
// one batch frame (server.max_batch_items has the same bound): a batch's
// tables and records are sized by it.
const MaxBatchItemsLimit = 65536

func New(opts Options) (*Server, error) {
	if opts.Engine == nil || opts.Listener == nil {
		return nil, errors.New("server: Engine and Listener are required")
	}
	if opts.MaxBlockBytes == 0 {
		return nil, errors.New("server: MaxBlockBytes must be positive")
	}
	if opts.MaxBatchItems <= 0 {
		opts.MaxBatchItems = 4096
	}
	if opts.MaxBatchItems > MaxBatchItemsLimit {
		return nil, fmt.Errorf("server: MaxBatchItems %d: at most %d items in one batch frame", opts.MaxBatchItems, MaxBatchItemsLimit)
	}
	if opts.MaxConns <= 0 {
		opts.MaxConns = 4096
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = 30 * time.Second
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = 60 * time.Second
	}
	if opts.BodyTimeout <= 0 {
		opts.BodyTimeout = 60 * time.Second
	}
	if opts.StalledCut <= 0 {
		opts.StalledCut = defaultStalledCut
	}
	if opts.lingerTime <= 0 {
		opts.lingerTime = lingerTime
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Clock == nil {
		opts.Clock = engine.SystemClock{}
	}
	pool := iobuf.NewPool(int(opts.MaxBlockBytes))
	largest := uint64(iobuf.SizeFor(int(opts.MaxBlockBytes)))
	if opts.BufferBudget == 0 {
		// 1 GiB holds 32 connections' 4 MiB values at once, far past what
		// the benchmarks need, and bounds what a flood of large PUTs or
		// slow readers can make the node allocate.
		opts.BufferBudget = max(1<<30, 2*largest)
	}
	if opts.BufferBudget < largest {
		return nil, fmt.Errorf("server: BufferBudget %d is less than the %d-byte buffer for the largest value", opts.BufferBudget, largest)
	}
	if opts.TLS != nil && opts.RDMA != nil {
		return nil, errors.New("server: TLS with RDMA: the RDMA bootstrap and transfers would bypass TLS; turn RDMA off (DFKV_RDMA) on a node with server.tls_cert")
	}
	if opts.Credentials != nil && (opts.Shm != nil || opts.RDMA != nil) {
		return nil, errors.New("server: Credentials with shared memory or RDMA: one-sided reads map the whole RAM arena, which no credential can confine to its tenants; turn them off (server.shm_socket, DFKV_RDMA) on a node with server.credentials_file")
	}
	lender, _ := opts.Engine.(engine.Lender)
	receiver, _ := opts.Engine.(engine.Receiver)
	var shmn *shmNode
	if opts.Shm != nil {
		if opts.Shm.Listener == nil {
			return nil, errors.New("server: Shm without a Listener")
		}
		var err error
		if shmn, err = newShmNode(opts.Shm); err != nil {
			return nil, err
		}
	}
	var pins *pinSet
	if pn, ok := opts.Engine.(engine.Pinner); ok && opts.LeaseTTL > 0 && opts.LeaseMax > 0 {
		var err error
		if pins, err = newPinSet(pn, opts.LeaseTTL, opts.LeaseMax); err != nil {
			return nil, fmt.Errorf("server: pins: %w", err)
		}
	}
	stop, stopNow := context.WithCancel(context.Background())
	s := &Server{
		tlsRefusing: make(chan struct{}, tlsRefusals),
		pins:        pins,
		shm:         shmn,
		budget:      newPayloadBudget(opts.BufferBudget),
		epoch:       opts.Clock.Now(),
		stop:        stop,
		stopNow:     stopNow,
		lender:      lender,
		receiver:    receiver,
		opts:        opts,
		writeSlack:  deadline.Slack(opts.WriteTimeout),
		lim:         wire.Limits{MaxBlockBytes: opts.MaxBlockBytes, MaxBatchItems: uint64(opts.MaxBatchItems)},
		log:         opts.Logger,
		pool:        pool,
		conns:       make(map[*conn]struct{}),
	}
	s.budget.pressure, s.budget.recheck = s.cutStalled, max(opts.StalledCut/4, 10*time.Millisecond)
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.opts.Listener.Addr() }

// Serve accepts connections until ctx ends, then shuts down gracefully:
// it stops accepting, lets every request already being read or executed
// finish and its response be written, closes idle connections, and
// returns once all connections are gone or ShutdownTimeout passed. The
// engine is not closed: its owner syncs and closes it after Serve returns.
func (s *Server) Serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, s.beginShutdown)
	defer stop()

	if s.pins != nil {
		sweepStop := make(chan struct{})
		defer close(sweepStop)
		go s.pins.run(sweepStop)
	}
	shmDone := make(chan error, 1)
	if s.shm != nil {
		go func() { shmDone <- s.acceptLoop(ctx, s.shm.opts.Listener, true) }()
	} else {
		shmDone <- nil
	}
	acceptErr := s.acceptLoop(ctx, s.opts.Listener, false)
	if err := <-shmDone; acceptErr == nil {
		acceptErr = err
	}
	s.drain()
	if s.shm != nil {
		s.shm.close()
	}
	if s.pins != nil {
		s.pins.close()
	}
	return acceptErr
}

// acceptLoop accepts connections on ln until shutdown; shm marks the
// shared-memory socket, whose connections begin with the lease hello.
func (s *Server) acceptLoop(ctx context.Context, ln net.Listener, shm bool) error {
	fails := 0 // consecutive transient Accept failures
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.isClosing() {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if accept.Transient(err) {
				// Out of descriptors or kernel memory, or one failed
				// handshake: every open connection keeps being served,
				// and accepting resumes when the shortage passes.
				fails++
				s.stats.acceptErrors.Add(1)
				pause := accept.Pause(fails)
				s.acceptWarn.Warn(s.log, time.Now(), "accept failed; retrying: open connections are still served, new ones wait (if it is too many open files, raise LimitNOFILE or lower server.max_conns)",
					"listen", ln.Addr().String(), "err", err, "retry_in", pause.String())
				select {
				case <-time.After(pause):
				case <-ctx.Done():
				}
				continue
			}
			s.beginShutdown()
			return err
		}
		fails = 0
		s.startConn(nc, shm)
	}
}

// SetDraining marks the node as leaving: it serves on, and /readyz says
// it is not ready, so load balancers move off as clients do.
func (s *Server) SetDraining() { s.draining.Store(true) }

func (s *Server) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

func (s *Server) startConn(nc net.Conn, shm bool) {
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
		if b := s.opts.SocketBuffer; b > 0 {
			_ = tc.SetReadBuffer(b)
			_ = tc.SetWriteBuffer(b)
		}
	}
	s.mu.Lock()
	if !s.closing && len(s.conns)-s.cutting >= s.opts.MaxConns {
		s.closeIdlest()
	}
	if s.closing || len(s.conns) >= s.opts.MaxConns+s.cutting {
		closing := s.closing
		s.mu.Unlock()
		s.stats.refused.Add(1)
		if !closing {
			s.refusedWarn.Warn(s.log, time.Now(), "refusing connection: max_conns reached and no connection idle for long",
				"remote", nc.RemoteAddr().String(), "max_conns", s.opts.MaxConns)
			// Best effort: tell the client why before closing.
			msg := "node has max_conns open connections; retry later or raise DFKV_SERVER_MAX_CONNS"
			_ = nc.SetWriteDeadline(s.opts.Clock.Now().Add(time.Second))
			switch {
			case shm:
				_ = shmRefuse(nc, wire.StatusUnavailable, msg)
			case s.opts.TLS != nil:
				s.refuseTLS(nc, msg)
				return
			default:
				hdr := wire.AppendResponse(nil, &wire.ResponseHeader{Status: wire.StatusUnavailable, BodyLen: uint64(len(msg))})
				_, _ = nc.Write(append(hdr, msg...))
			}
		}
		_ = nc.Close()
		return
	}
	var batch *recordBatcher
	if s.opts.TLS != nil && !shm {
		batch = &recordBatcher{Conn: nc}
		// The handshake runs on the connection's first read, under its
		// first-request deadline.
		nc = tls.Server(batch, s.opts.TLS)
	}
	c := newConn(s, nc)
	c.batch = batch
	c.needHello = shm
	s.conns[c] = struct{}{}
	s.inflight.Add(1)
	s.mu.Unlock()
	s.stats.accepted.Add(1)
	s.stats.conns.Add(1)
	go c.serve()
}

// tlsRefusals is how many connections refused at max_conns may be told
// so through TLS at once; past it they are only closed.
const tlsRefusals = 16

// refuseTLS says msg (UNAVAILABLE) to a TLS client refused at max_conns,
// and closes nc. Written in clear, the frame would read to the client as
// a peer that does not speak TLS: a configuration error, not a busy
// node. The handshake and the frame get a second, off the accept loop.
func (s *Server) refuseTLS(nc net.Conn, msg string) {
	select {
	case s.tlsRefusing <- struct{}{}:
	default:
		_ = nc.Close()
		return
	}
	go func() {
		defer func() { <-s.tlsRefusing }()
		tc := tls.Server(nc, s.opts.TLS)
		_ = tc.SetDeadline(s.opts.Clock.Now().Add(time.Second))
		if tc.Handshake() == nil {
			hdr := wire.AppendResponse(nil, &wire.ResponseHeader{Status: wire.StatusUnavailable, BodyLen: uint64(len(msg))})
			_, _ = tc.Write(append(hdr, msg...))
		}
		_ = tc.Close()
	}()
}

// idleCutAfter is how long a connection must have waited on its client
// before max_conns may close it to admit a new one: long enough that a
// client's pooled connection between two calls is not churned.
const idleCutAfter = time.Second

// closeIdlest closes the connection that has waited longest on its client
// (idle, or stalled in a request prefix), if one has waited idleCutAfter,
// so a full node admits a new connection instead of refusing it: idle
// connections never expire otherwise, and one client holding max_conns of
// them would lock every other client out. A client's pooled connection
// closed while idle is redialed on its next call. The caller holds s.mu;
// the connection leaves s.conns when its goroutine ends, and s.cutting
// counts it until then.
func (s *Server) closeIdlest() {
	now := s.opts.Clock.Now()
	var victim *conn
	var longest time.Duration
	for c := range s.conns {
		if d, ok := c.waitingFor(now); ok && d >= idleCutAfter && d > longest {
			victim, longest = c, d
		}
	}
	if victim == nil || !victim.cutIfWaiting(now, idleCutAfter) {
		return
	}
	victim.cut = true
	s.cutting++
	s.stats.idleClosed.Add(1)
	s.idleCutWarn.Warn(s.log, time.Now(), "max_conns reached: closed the longest-idle connection to admit a new one",
		"remote", victim.nc.RemoteAddr().String(), "idle", longest.Round(time.Millisecond).String(), "max_conns", s.opts.MaxConns)
}

func (s *Server) removeConn(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	if c.cut {
		s.cutting--
	}
	s.mu.Unlock()
	s.stats.conns.Add(-1)
	s.inflight.Done()
}

// beginShutdown stops the accept loop and wakes every idle connection so
// it exits; busy connections notice after their current request.
func (s *Server) beginShutdown() {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return
	}
	s.closing = true
	s.stopNow()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	_ = s.opts.Listener.Close()
	if s.shm != nil {
		_ = s.shm.opts.Listener.Close()
	}
	for _, c := range conns {
		c.stopIfIdle()
	}
}

// drain waits for connections to finish, forcing them closed after
// ShutdownTimeout.
func (s *Server) drain() {
	done := make(chan struct{})
	go func() { s.inflight.Wait(); close(done) }()
	t := time.NewTimer(s.opts.ShutdownTimeout)
	defer t.Stop()
	select {
	case <-done:
		return
	case <-t.C:
	}
	// Closed outside the lock: a TLS close may wait to send its alert to
	// a client that stopped reading, and exiting connections need s.mu.
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		if c.batch != nil {
			// The socket under TLS, without a close_notify: the alert
			// would go through the record batcher, which the
			// connection's own goroutine may be flushing right now.
			_ = c.batch.Conn.Close()
			continue
		}
		_ = c.nc.Close()
	}
	s.log.Warn("shutdown timeout: closed connections with requests still in flight", "connections", len(conns), "timeout", s.opts.ShutdownTimeout.String())
	<-done
}

// Stats is a snapshot of the server's counters.
type Stats struct {
	OpenConns        int64             `json:"open_conns"`
	Serving          int64             `json:"serving_conns"`
	Accepted         uint64            `json:"accepted"`
	Refused          uint64            `json:"refused"`
	IdleClosed       uint64            `json:"idle_closed"`
	StalledClosed    uint64            `json:"stalled_closed"`
	AcceptErrors     uint64            `json:"accept_errors"`
	BufferInUse      int64             `json:"buffer_in_use_bytes"`
	BufferWaits      uint64            `json:"buffer_waits"`
	BufferTimeouts   uint64            `json:"buffer_wait_timeouts"`
	FirstReqTimeouts uint64            `json:"first_request_timeouts"`
	FrameErrors      uint64            `json:"frame_errors"`
	BytesIn          uint64            `json:"bytes_in"`
	BytesOut         uint64            `json:"bytes_out"`
	Ops              map[string]uint64 `json:"ops"`
}

// Stats returns the server's counters.
func (s *Server) Stats() Stats {
	st := Stats{
		OpenConns:        s.stats.conns.Load(),
		Serving:          s.stats.serving.Load(),
		Accepted:         s.stats.accepted.Load(),
		Refused:          s.stats.refused.Load(),
		IdleClosed:       s.stats.idleClosed.Load(),
		StalledClosed:    s.stats.stalledCut.Load(),
		AcceptErrors:     s.stats.acceptErrors.Load(),
		BufferInUse:      s.budget.inUse.Load(),
		BufferWaits:      s.budget.waits.Load(),
		BufferTimeouts:   s.budget.timeouts.Load(),
		FirstReqTimeouts: s.stats.firstReqTimeouts.Load(),
		FrameErrors:      s.stats.frameErrors.Load(),
		BytesIn:          s.stats.bytesIn.Load(),
		BytesOut:         s.stats.bytesOut.Load(),
		Ops:              make(map[string]uint64),
	}
	for op := wire.OpPing; op <= wire.LastOp; op++ {
		st.Ops[op.String()] = s.stats.ops[op].Load()
	}
	return st
}
