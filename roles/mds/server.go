package mds

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dfkv/dfkv/roles/internal/accept"
	"github.com/dfkv/dfkv/roles/internal/creds"
	"github.com/dfkv/dfkv/wire"
)

// controlServer answers the MDS control protocol from a Directory.
type controlServer struct {
	dir      Directory
	ln       net.Listener
	log      *slog.Logger
	ttl      time.Duration
	firstReq time.Duration
	// backendDown reports the backend's last probe failed (nil: never).
	// The directory's epoch is then only what this MDS last saw (an etcd
	// watch cut off by a partition reports no error, it just stops), so
	// MEMBERS answers no "unchanged": a client that holds a list is sent
	// to its next MDS, a starting one gets the backend's list or the last.
	backendDown func() bool
	// creds, when set, binds REGISTER, HEARTBEAT and DEREGISTER to the
	// node ids a token's credential lists (auth.go); membersNeedToken
	// also requires one with members = true for MEMBERS.
	creds            *creds.Watch[creds.Nodes]
	membersNeedToken bool

	// maxConns caps the open control connections (0: no cap); at the
	// cap the longest idle one is closed to admit a new one (clients
	// open a connection per call, so an idle one is a client that went
	// quiet), so that connections held open, by a fault or on purpose,
	// never take the descriptors heartbeats and the backend need.
	maxConns int

	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]*controlConn
	done  bool

	// replies caches the encoded MEMBERS reply per group at an epoch, for
	// at most replyCacheAge, so a fleet of polling clients costs the
	// backend one read per change rather than one per poll.
	cacheMu sync.Mutex
	replies map[string]cachedReply

	// After the backend was away (settle.go), the member lists of before,
	// served while a mass expiry that the outage caused settles.
	settleMu    sync.Mutex
	settleUntil time.Time
	settleFrom  map[string]cachedReply

	registrations    atomic.Uint64
	deregistrations  atomic.Uint64
	firstReqTimeouts atomic.Uint64
	frameErrors      atomic.Uint64
	acceptErrors     atomic.Uint64
	staleReplies     atomic.Uint64 // MEMBERS answered from the last list while the backend failed
	settledReplies   atomic.Uint64 // MEMBERS answered with the list of before an outage while re-registrations settle
	unauthenticated  atomic.Uint64 // requests without an accepted token, with credentials on
	forbidden        atomic.Uint64 // requests whose credential does not cover the node id or MEMBERS
	duplicateIDs     atomic.Uint64 // REGISTERs refused: a live member holds the id at another address
	shedConns        atomic.Uint64 // connections closed at maxConns: the longest idle, or the new one when none was
}

// controlConn is what the server knows of an open control connection.
type controlConn struct {
	// idleSince is when it began waiting for its next request, as
	// monoNow reads it; 0 while a request is read or served.
	idleSince atomic.Int64
}

// monoStart anchors monoNow.
var monoStart = time.Now()

// monoNow is the monotonic clock in nanoseconds since monoStart, plus one
// (never 0): kept in an atomic and compared, it stays immune to steps of
// the wall clock, as Unix time would not.
func monoNow() int64 { return int64(time.Since(monoStart)) + 1 }

// shedLocked makes room for one more connection at maxConns: it takes
// the connection idle the longest out of conns and returns it, for the
// caller to close once it released mu (a TLS close may wait to send its
// alert), or returns nil when none is idle. The caller holds mu.
func (s *controlServer) shedLocked() net.Conn {
	var oldest net.Conn
	var since int64
	for c, cc := range s.conns {
		if t := cc.idleSince.Load(); t != 0 && (oldest == nil || t < since) {
			oldest, since = c, t
		}
	}
	if oldest != nil {
		delete(s.conns, oldest)
	}
	return oldest
}

// serve accepts until ctx ends, then closes every connection (control
// requests are short and idempotent; a client retries elsewhere).
func (s *controlServer) serve(ctx context.Context) {
	s.mu.Lock()
	s.conns = map[net.Conn]*controlConn{}
	s.mu.Unlock()
	stop := context.AfterFunc(ctx, func() {
		// Closed outside the lock: a TLS close may wait to send its
		// alert, and exiting handlers need s.mu.
		s.mu.Lock()
		s.done = true
		conns := make([]net.Conn, 0, len(s.conns))
		for c := range s.conns {
			conns = append(conns, c)
		}
		s.mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
		_ = s.ln.Close()
	})
	defer stop()
	fails := 0 // consecutive transient Accept failures
	for {
		c, err := s.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if ctx.Err() == nil && accept.Transient(err) {
				// Out of descriptors or kernel memory: the directory
				// keeps serving its open connections and accepts again
				// when the shortage passes, instead of going deaf to
				// every node's heartbeat. One line when it starts, one
				// when it ends.
				fails++
				s.acceptErrors.Add(1)
				if fails == 1 {
					s.log.Warn("MDS: accept failed; retrying until it succeeds (if it is too many open files, raise LimitNOFILE)",
						"listen", s.ln.Addr().String(), "err", err)
				}
				select {
				case <-time.After(accept.Pause(fails)):
				case <-ctx.Done():
				}
				continue
			}
			if ctx.Err() == nil {
				s.log.Error("MDS: control listener failed; no new control connections will be accepted", "listen", s.ln.Addr().String(), "err", err)
			}
			break
		}
		if fails > 0 {
			s.log.Info("MDS: accepting again", "listen", s.ln.Addr().String(), "failed_accepts", fails)
			fails = 0
		}
		s.mu.Lock()
		if s.done {
			s.mu.Unlock()
			_ = c.Close()
			break
		}
		var shed net.Conn
		if s.maxConns > 0 && len(s.conns) >= s.maxConns {
			s.shedConns.Add(1)
			if shed = s.shedLocked(); shed == nil {
				s.mu.Unlock()
				_ = c.Close()
				continue
			}
		}
		cc := &controlConn{}
		cc.idleSince.Store(monoNow())
		s.conns[c] = cc
		s.wg.Add(1)
		s.mu.Unlock()
		if shed != nil {
			_ = shed.Close()
		}
		go s.handle(ctx, c, cc)
	}
	s.wg.Wait()
}

func (s *controlServer) handle(ctx context.Context, c net.Conn, cc *controlConn) {
	defer func() {
		s.mu.Lock()
		if s.conns[c] == cc {
			delete(s.conns, c)
		}
		s.mu.Unlock()
		_ = c.Close()
		s.wg.Done()
	}()
	br := bufio.NewReader(c)
	var hdr [wire.RequestPrefixLen]byte
	for first := true; ; first = false {
		if s.firstReq > 0 {
			// Every request, not only the first, must arrive whole within
			// it: clients open a connection per call, and one that sends a
			// request and then part of another would otherwise hold a
			// descriptor for good (enough of them stop heartbeats, which
			// expires every node).
			_ = c.SetReadDeadline(time.Now().Add(s.firstReq))
		}
		// The first byte alone says whether the request is of this
		// epoch: one of another generation is refused now, not when the
		// prefix it will never complete times out.
		if !first {
			cc.idleSince.Store(monoNow())
		}
		peeked, err := br.Peek(1)
		cc.idleSince.Store(0)
		if first && err != nil && s.tlsRefused(c, err) {
			return
		}
		if err == nil {
			if ferr := wire.ForeignMDSEpoch(peeked); ferr != nil {
				fe := ferr.(*wire.FrameError)
				s.frameErrors.Add(1)
				s.log.Warn("MDS: closing connection after a request of another epoch", "remote", c.RemoteAddr().String(), "error", fe.Message)
				s.reply(c, fe.Status, 0, []byte(fe.Message))
				return
			}
			if first && s.shortPrefix(c, br) {
				return
			}
			_, err = io.ReadFull(br, hdr[:])
		}
		if err != nil {
			if first && errors.Is(err, os.ErrDeadlineExceeded) {
				s.firstReqTimeouts.Add(1)
				s.log.Warn("MDS: closing control connection: no complete first request within the deadline",
					"remote", c.RemoteAddr().String(), "first_request_ms", s.firstReq.Milliseconds())
			}
			return
		}
		op, known, n, err := wire.DecodeMDSRequest(hdr[:])
		if err != nil {
			var fe *wire.FrameError
			errors.As(err, &fe)
			s.frameErrors.Add(1)
			s.log.Warn("MDS: closing connection after malformed control request", "remote", c.RemoteAddr().String(), "error", err.Error())
			s.reply(c, fe.Status, 0, []byte(fe.Message))
			return
		}
		// The credential that authorizes a request is inside its body,
		// so the body is read before any check: as it arrives.
		body, err := wire.ReadGrowing(br, nil, n)
		if err != nil {
			if first && errors.Is(err, os.ErrDeadlineExceeded) {
				s.firstReqTimeouts.Add(1)
			}
			return
		}
		st, epoch, out := s.do(ctx, op, known, body)
		if err := s.reply(c, st, epoch, out); err != nil {
			return
		}
		if st == wire.StatusUnauthenticated || st == wire.StatusForbidden {
			// A refused client gets its answer and nothing more: it may
			// not keep a connection (a descriptor) it has no right to use.
			return
		}
	}
}

// shortPrefix refuses, at once, a first request whose prefix stops short
// and goes quiet for wire.ShortPrefixGap (a peer of a generation with
// shorter frames), and reports whether it did. Otherwise the request's
// deadline is as before.
func (s *controlServer) shortPrefix(c net.Conn, br *bufio.Reader) bool {
	if br.Buffered() >= wire.RequestPrefixLen {
		return false
	}
	_ = c.SetReadDeadline(time.Now().Add(wire.ShortPrefixGap))
	_, err := br.Peek(wire.RequestPrefixLen)
	if err == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
		if s.firstReq > 0 {
			_ = c.SetReadDeadline(time.Now().Add(s.firstReq))
		} else {
			_ = c.SetReadDeadline(time.Time{})
		}
		return false
	}
	fe := wire.ShortPrefix(br.Buffered(), wire.RequestPrefixLen, "this MDS")
	s.frameErrors.Add(1)
	s.log.Warn("MDS: closing connection after a short first frame", "remote", c.RemoteAddr().String(), "error", fe.Message)
	s.reply(c, fe.Status, 0, []byte(fe.Message))
	return true
}

// tlsRefused answers a plaintext client on a TLS control port in
// plaintext, so it reads why instead of a reset, and reports whether err
// was that.
func (s *controlServer) tlsRefused(c net.Conn, err error) bool {
	var rhe tls.RecordHeaderError
	if !errors.As(err, &rhe) || rhe.Conn == nil {
		return false
	}
	s.frameErrors.Add(1)
	s.log.Warn("MDS: closing connection: the client does not speak TLS", "remote", c.RemoteAddr().String())
	msg := []byte("this MDS's control port requires TLS: turn on the client's TLS (client.tls, or server.mds_tls_ca for a node)")
	_ = rhe.Conn.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = rhe.Conn.Write(append(wire.AppendMDSResponse(nil, wire.StatusEpochMismatch, 0, len(msg)), msg...))
	return true
}

func (s *controlServer) reply(c net.Conn, st wire.Status, epoch uint64, body []byte) error {
	_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_, err := c.Write(append(wire.AppendMDSResponse(nil, st, epoch, len(body)), body...))
	return err
}

// do executes one control request and returns its status, the epoch and
// the reply body (JSON, or a message for a non-OK status).
func (s *controlServer) do(ctx context.Context, op wire.Op, known uint64, body []byte) (wire.Status, uint64, []byte) {
	var req wire.MDSRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return wire.StatusInvalid, 0, []byte("control request body is not the expected JSON: " + err.Error())
	}
	if err := wire.ValidateGroup(req.Group); err != nil {
		return wire.StatusInvalid, 0, []byte(err.Error())
	}
	if st, msg := s.authorize(op, &req); st != wire.StatusOK {
		return st, 0, []byte(msg)
	}
	switch op {
	case wire.OpMDSRegister:
		return s.register(ctx, req)
	case wire.OpMDSHeartbeat:
		return s.heartbeat(ctx, req)
	case wire.OpMDSDeregister:
		return s.deregister(ctx, req)
	case wire.OpMDSMembers:
		return s.members(ctx, req.Group, known)
	}
	return wire.StatusUnsupported, 0, []byte("unknown control op")
}

// failed is the reply to a request the directory refused: the error's
// status and message, with epoch (0 where the directory gave none).
func failed(epoch uint64, err error) (wire.Status, uint64, []byte) {
	return wire.StatusOf(err), epoch, []byte(err.Error())
}

func (s *controlServer) register(ctx context.Context, req wire.MDSRequest) (wire.Status, uint64, []byte) {
	if req.Member == nil {
		return wire.StatusInvalid, 0, []byte("REGISTER without a member")
	}
	m := *req.Member
	if err := validateMember(m); err != nil {
		return failed(0, err)
	}
	epoch, err := s.dir.Register(ctx, req.Group, m, s.admission(req.Group, m))
	if err != nil {
		return failed(0, err)
	}
	s.registrations.Add(1)
	s.log.Info("MDS: member registered", "group", req.Group, "id", m.ID, "addr", m.Addr, "weight", m.Weight, "epoch", epoch)
	out, _ := json.Marshal(wire.MDSReply{Epoch: epoch, HeartbeatTTLMS: s.ttl.Milliseconds()})
	return wire.StatusOK, epoch, out
}

func (s *controlServer) heartbeat(ctx context.Context, req wire.MDSRequest) (wire.Status, uint64, []byte) {
	if err := wire.ValidateMemberID(req.ID); err != nil {
		return failed(0, err)
	}
	// The TTL in force, so a node registered under another one (this MDS
	// restarted with a new heartbeat_ttl_ms) paces itself anew rather
	// than lapsing; older nodes read past the body. With etcd that is the
	// TTL of the node's lease, granted at its registration; bbolt's sweep
	// goes by this MDS's own.
	ttl := s.ttl
	var epoch uint64
	var err error
	if lt, ok := s.dir.(leaseTTLs); ok {
		var leaseTTL time.Duration
		if epoch, leaseTTL, err = lt.HeartbeatTTL(ctx, req.Group, req.ID); leaseTTL > 0 {
			ttl = leaseTTL
		}
	} else {
		epoch, err = s.dir.Heartbeat(ctx, req.Group, req.ID)
	}
	if err != nil {
		return failed(epoch, err)
	}
	out, _ := json.Marshal(wire.MDSReply{Epoch: epoch, HeartbeatTTLMS: ttl.Milliseconds()})
	return wire.StatusOK, epoch, out
}

// leaseTTLs is a Directory whose members live by leases, each with the
// TTL it was granted (etcd).
type leaseTTLs interface {
	HeartbeatTTL(ctx context.Context, group, id string) (uint64, time.Duration, error)
}

func (s *controlServer) deregister(ctx context.Context, req wire.MDSRequest) (wire.Status, uint64, []byte) {
	if err := wire.ValidateMemberID(req.ID); err != nil {
		return failed(0, err)
	}
	if req.Addr != "" {
		// Only the node's own registration: after its entry lapsed,
		// another node with the same id may hold it at its address.
		// A list that cannot be read (a record another node wrote badly)
		// does not keep this node listed: the removal goes on unchecked,
		// as before the check existed. The check and the removal are two
		// steps, so a registration landing between them is not seen.
		listEpoch, members, err := s.dir.Members(ctx, req.Group)
		if err != nil {
			members = nil
		}
		for _, m := range members {
			if m.ID == req.ID && m.Addr != req.Addr {
				s.log.Warn("MDS: DEREGISTER of a member listed at another address refused (two nodes with one id?)",
					"group", req.Group, "id", req.ID, "listed_at", m.Addr, "from", req.Addr)
				return failed(listEpoch, fmt.Errorf("member %q is registered at %s, not %s: %w", req.ID, m.Addr, req.Addr, ErrUnknownMember))
			}
		}
	}
	epoch, err := s.dir.Deregister(ctx, req.Group, req.ID)
	if err != nil {
		return failed(epoch, err)
	}
	s.deregistrations.Add(1)
	s.log.Info("MDS: member deregistered", "group", req.Group, "id", req.ID, "epoch", epoch)
	return wire.StatusOK, epoch, nil
}

// members answers MEMBERS: "unchanged" or the cached reply when the
// directory's epoch allows, else a fresh read (membersReply), else, with
// the backend down, the last list this MDS served.
func (s *controlServer) members(ctx context.Context, group string, known uint64) (wire.Status, uint64, []byte) {
	down := s.backendDown != nil && s.backendDown()
	if down && known != 0 {
		// A client that holds a list asks its next MDS (see below); no
		// need to make it wait for the backend's timeout first.
		return wire.StatusUnavailable, 0, []byte("this MDS cannot reach its directory backend (etcd); ask another MDS")
	}
	before, settling := s.settlingFrom(group)
	if !down && !settling {
		if r, ok := s.fromEpoch(ctx, group, known); ok {
			return r.status, r.epoch, r.body
		}
	} else if r, ok := s.last(group); down && ok && r.status == wire.StatusOK {
		// A client starting now gets the last list at once: asking the
		// backend first would hold it for the backend's timeout (about
		// 3 s against an etcd that does not answer), longer than many a
		// client's own call timeout. The probe that said "down" runs
		// every couple of seconds, so a backend back is asked again soon.
		s.staleReplies.Add(1)
		return r.status, r.epoch, r.body
	}
	epoch, members, err := s.dir.Members(ctx, group)
	if err != nil {
		// The backend is down (etcd unreachable): the last list this MDS
		// served is what the nodes' own heartbeats last said, and better
		// than nothing for a client starting now (an engine restarting, a
		// ctl run), which would otherwise fail to open. A client that
		// holds a list already is told UNAVAILABLE, not "unchanged": it
		// then asks its next MDS, which may reach etcd and know of
		// changes this one cannot see, and if none answers it routes over
		// its own list, as it would anyway.
		if r, ok := s.last(group); ok && r.status == wire.StatusOK && known == 0 {
			s.staleReplies.Add(1)
			return r.status, r.epoch, r.body
		}
		return failed(0, err)
	}
	if settling {
		if len(members) < memberCount(before) {
			// Fewer members than before the outage: leases that ran out
			// while the backend was away, their nodes re-registering now.
			s.settledReplies.Add(1)
			if known != 0 && known >= before.epoch {
				// The client's list is no older than the one from before
				// the outage (epochs only grow): it keeps its own.
				return wire.StatusOK, known, nil
			}
			return before.status, before.epoch, before.body
		}
		s.settled(group)
	}
	if known != 0 && known == epoch {
		return wire.StatusOK, epoch, nil
	}
	r := membersReply(group, epoch, members)
	if epoch != 0 {
		s.store(group, r) // not a group nobody registered in: asking must not grow the cache
	}
	return r.status, epoch, r.body
}

// fromEpoch answers MEMBERS from the directory's epoch alone, when it can:
// "unchanged" (no body) for a client that knows it, or the reply cached
// at it. The reply's epoch is in r.epoch.
func (s *controlServer) fromEpoch(ctx context.Context, group string, known uint64) (r cachedReply, ok bool) {
	e, err := s.dir.Epoch(ctx, group)
	if err != nil || e == 0 {
		return cachedReply{}, false
	}
	s.confirm(group, e)
	if known == e {
		return cachedReply{epoch: e, status: wire.StatusOK}, true
	}
	return s.cached(group, e)
}

// membersReply encodes the MEMBERS reply for members at epoch: OK with
// the list, or TOO_LARGE with a message when it exceeds membersReplyCap.
func membersReply(group string, epoch uint64, members []wire.MemberInfo) cachedReply {
	now := time.Now()
	r := cachedReply{epoch: epoch, at: now, confirmed: now, status: wire.StatusOK}
	// Routing needs id, address, weight (and capacity and heartbeat for
	// ctl members); disks and versions stay on the HTTP /members page,
	// which keeps the reply a client decodes every change small.
	slim := make([]wire.MemberInfo, len(members))
	for i, m := range members {
		m.Disks, m.Version = nil, ""
		slim[i] = m
	}
	r.body, _ = json.Marshal(wire.MDSReply{Epoch: epoch, Members: slim})
	if len(r.body) > membersReplyCap {
		r.status = wire.StatusTooLarge
		r.body = []byte(fmt.Sprintf(
			"member list of group %s is %d bytes (%d members), over the %d-byte reply cap; split the group",
			group, len(r.body), len(members), membersReplyCap))
	}
	return r
}

// membersReplyCap is wire.MaxMembersReply; a variable so a test can reach
// it with tens of members instead of thousands.
var membersReplyCap = wire.MaxMembersReply

// replyCacheAge bounds how stale the informational fields of a cached
// reply (last heartbeat times) may get; the member set itself is keyed by
// epoch and never stale.
const replyCacheAge = time.Second

type cachedReply struct {
	epoch     uint64
	at        time.Time // when it was read
	confirmed time.Time // when the backend last said its epoch is current
	status    wire.Status
	body      []byte
}

func (s *controlServer) cached(group string, epoch uint64) (cachedReply, bool) {
	r, ok := s.last(group)
	if !ok || r.epoch != epoch || time.Since(r.at) > replyCacheAge {
		return cachedReply{}, false
	}
	return r, true
}

// last is the group's latest reply, however old.
func (s *controlServer) last(group string) (cachedReply, bool) {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	r, ok := s.replies[group]
	return r, ok
}

// confirm notes that the backend's epoch of group is epoch: the cached
// list, if it is at that epoch, is current (what the settle window needs
// to know of the lists it may hand out).
func (s *controlServer) confirm(group string, epoch uint64) {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	if r, ok := s.replies[group]; ok && r.epoch == epoch {
		r.confirmed = time.Now()
		s.replies[group] = r
	}
}

func (s *controlServer) store(group string, r cachedReply) {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	if s.replies == nil {
		s.replies = map[string]cachedReply{}
	}
	s.replies[group] = r
}

// maxMemberAddr bounds a member's address: a 253-byte DNS name or a
// bracketed IPv6 address with a zone, a colon and a port.
const maxMemberAddr = 272

func validateMember(m wire.MemberInfo) error {
	if err := wire.ValidateMemberID(m.ID); err != nil {
		return err
	}
	if len(m.Addr) > maxMemberAddr {
		// Every client decodes every member's address on each change, and
		// the whole list must fit one MEMBERS reply: one node with a long
		// one would make the list unreadable for all.
		return fmt.Errorf("member %s: address of %d bytes, over %d (a DNS name is at most 253): %w", m.ID, len(m.Addr), maxMemberAddr, wire.StatusInvalid)
	}
	host, port, err := net.SplitHostPort(m.Addr)
	if err == nil && host != "" {
		// A port is 1..65535 in decimal; clients do not check the
		// addresses they are given, so a member at a port nobody can
		// dial would make its share of the keys miss.
		var n uint64
		if n, err = strconv.ParseUint(port, 10, 16); err == nil && n == 0 {
			err = errors.New("port 0")
		}
	}
	if err != nil || host == "" {
		return fmt.Errorf("member %s: address %q is not a reachable host:port: %w", m.ID, m.Addr, wire.StatusInvalid)
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return fmt.Errorf("member %s: address %q is unspecified; set server.advertise_addr: %w", m.ID, m.Addr, wire.StatusInvalid)
	}
	if m.Weight < 1 || m.Weight > wire.MaxMemberWeight {
		return fmt.Errorf("member %s: weight %d outside 1..%d: %w", m.ID, m.Weight, wire.MaxMemberWeight, wire.StatusInvalid)
	}
	return nil
}
