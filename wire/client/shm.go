package client

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/dfkv/dfkv/wire"
	"github.com/dfkv/dfkv/wire/shm"
)

// Shared-memory modes (Options.SharedMemory).
const (
	// ShmAuto uses a node's shared-memory socket when the node is on this
	// host and offers one, and TCP otherwise.
	ShmAuto = "auto"
	// ShmOff always uses TCP.
	ShmOff = "off"
	// ShmOn requires shared memory: a call to a node that does not offer
	// it fails (for benchmarks that must measure what they claim).
	ShmOn = "on"
)

// shmRetry is how long a node whose shared memory could not be used is
// served over TCP before the client asks again.
const shmRetry = 30 * time.Second

// shmPeer is what a client knows of one node's shared-memory socket.
type shmPeer struct {
	mu          sync.Mutex
	state       int  // shmUnknown, shmNone, shmReady
	discovering bool // a dial is looking the socket up
	retryAt     time.Time
	path        string
	instance    uint64
	maps        *shmMaps // the node's arena and lease words, mapped once per node instance
	why         string   // why shared memory is not used (for ShmOn's errors)
}

const (
	shmUnknown = iota
	shmNone
	shmReady
)

// shmMaps are a node instance's read-only mappings, shared by every
// connection to it; the last connection to close unmaps them.
type shmMaps struct {
	instance uint64
	arena    []byte
	words    []byte
	refs     int // connections using them (under shmPeer.mu)
	leaseTTL time.Duration
}

// leaseConn is a shared-memory connection's own state.
type leaseConn struct {
	maps    *shmMaps
	staging []byte
	pending []wire.LeaseID // leases copied out, released with the next lease request
}

// word is the lease word of slot i, read atomically.
func (m *shmMaps) word(i uint32) uint64 {
	if uint64(i)*8+8 > uint64(len(m.words)) {
		return 0
	}
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&m.words[uint64(i)*8])))
}

// localAddrs caches this host's interface addresses.
var localAddrs = sync.OnceValue(func() map[string]bool {
	out := map[string]bool{}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			out[ipn.IP.String()] = true
		}
	}
	return out
})

// isLocal reports whether addr (host:port) names this host.
func isLocal(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	if ip == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		ips, err := net.DefaultResolver.LookupIP(ctx, "ip", host)
		if err != nil || len(ips) == 0 {
			return false
		}
		ip = ips[0]
	}
	return ip.IsLoopback() || localAddrs()[ip.String()]
}

// dialShm connects to p over shared memory when the node is on this
// host and offers it, and over TCP otherwise (in ShmOn: fails instead).
// A node's socket is looked up once (SHM_INFO over TCP) and again after
// shmRetry when it could not be used. No lock is held across the network:
// one dial at a time looks the socket up while the others use TCP, and
// the look-up is bounded by DialTimeout, so a hung node holds up no more
// than the call that found it.
func (p *peer) dialShm(ctx context.Context, deadline time.Time) (*cconn, error) {
	s := &p.shm
	now := time.Now()
	s.mu.Lock()
	state, path, instance := s.state, s.path, s.instance
	discover := !s.discovering && (state == shmUnknown || (state == shmNone && !now.Before(s.retryAt)))
	if discover || p.opts.SharedMemory == ShmOn && state != shmReady {
		discover, s.discovering = true, true
	}
	s.mu.Unlock()
	if state == shmReady {
		cc, err := p.shmConnect(ctx, deadline, path, instance)
		if err == nil {
			return cc, nil
		}
		// Most often the node restarted: a new instance, maybe a new
		// socket. Look it up again now, in this call, rather than go to
		// TCP (or, in ShmOn, fail) until the retry interval passes; a
		// look-up that fails too settles on TCP as at the first dial.
		p.opts.Logger.Warn("client: shared memory of a node on this host failed; looking its socket up again", "node", p.addr, "socket", path, "err", err)
		s.mu.Lock()
		if s.state == shmReady && s.instance == instance {
			s.state, s.why = shmUnknown, err.Error()
		}
		// One caller looks it up while the others use TCP; with shm =
		// on there is no TCP to use, so each looks it up itself (as a
		// first dial in ShmOn does) rather than fail.
		if !s.discovering || p.opts.SharedMemory == ShmOn {
			discover, s.discovering = true, true
		}
		s.mu.Unlock()
	}
	if !discover {
		if err := p.shmRefused(); err != nil {
			return nil, err
		}
		return p.dialTCP(ctx, deadline)
	}
	defer func() {
		s.mu.Lock()
		s.discovering = false
		s.mu.Unlock()
	}()
	if !isLocal(p.addr) {
		s.settle(shmNone, "", 0, "the node is not on this host")
		if err := p.shmRefused(); err != nil {
			return nil, err
		}
		return p.dialTCP(ctx, deadline)
	}
	tcp, err := p.dialTCP(ctx, deadline)
	if err != nil {
		return nil, err
	}
	bounded := minTime(deadline, time.Now().Add(p.opts.DialTimeout))
	path, instance, err = shmInfo(tcp, bounded)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// The node took the connection and said nothing: it is as
		// unresponsive as a call to it would find it, and the call fails
		// the same way (a timeout), not after a second dial.
		_ = tcp.nc.Close()
		s.settle(shmNone, "", 0, "the node did not answer SHM_INFO in time")
		return nil, connError(p.addr, err)
	}
	if err == nil {
		var cc *cconn
		if cc, err = p.shmConnect(ctx, bounded, path, instance); err == nil {
			_ = tcp.nc.Close()
			p.opts.Logger.Info("client: using shared memory for a node on this host", "node", p.addr, "socket", path)
			s.settle(shmReady, path, instance, "")
			return cc, nil
		}
	}
	s.settle(shmNone, "", 0, err.Error())
	if refused := p.shmRefused(); refused != nil {
		_ = tcp.nc.Close()
		return nil, refused
	}
	if tcp.broken { // an older node refuses SHM_INFO and closes
		_ = tcp.nc.Close()
		return p.dialTCP(ctx, deadline)
	}
	tcp.wbuf = tcp.wbuf[:0]
	return tcp, nil
}

// settle records what the client now knows of the node's socket.
func (s *shmPeer) settle(state int, path string, instance uint64, why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.state, s.path, s.instance, s.why = state, path, instance, why
	if state == shmNone {
		s.retryAt = time.Now().Add(shmRetry)
	}
}

// errShmRequired is wrapped by shmRefused's error: a client that demands
// shared memory of a node that cannot give it is misconfigured for that
// node, which is up; the call fails without counting against the node or
// reading as a miss.
var errShmRequired = errors.New("shared memory required")

// shmRefused is nil in ShmAuto (TCP serves) and the reason in ShmOn.
func (p *peer) shmRefused() error {
	if p.opts.SharedMemory != ShmOn {
		return nil
	}
	p.shm.mu.Lock()
	why := p.shm.why
	p.shm.mu.Unlock()
	return fmt.Errorf("dfkv node %s: shared memory is required (client shm = on) but cannot be used: %s: %w: %w", p.addr, why, errShmRequired, wire.StatusUnavailable)
}

// shmInfo asks the node, over tcp, for its shared-memory socket.
func shmInfo(tcp *cconn, deadline time.Time) (string, uint64, error) {
	_ = tcp.nc.SetDeadline(deadline)
	defer tcp.nc.SetDeadline(time.Time{})
	tcp.wbuf = wire.AppendRequest(tcp.wbuf[:0], &wire.RequestHeader{Op: wire.OpShmInfo})
	if err := tcp.send(nil); err != nil {
		return "", 0, err
	}
	h, err := tcp.readHeader()
	if err != nil {
		tcp.broken = true // an older node refuses the op and closes
		if wire.StatusOf(err) == wire.StatusNotFound {
			return "", 0, errors.New("the node has no shared-memory socket (server.shm_socket)")
		}
		if ne, ok := errors.AsType[net.Error](err); wire.StatusOf(err) == wire.StatusTimeout || ok && ne.Timeout() {
			// Silence says nothing of shared memory: the node (or
			// whatever listens there) does not answer at all.
			return "", 0, fmt.Errorf("the node did not answer: %w", err)
		}
		return "", 0, fmt.Errorf("the node does not offer shared memory: %w", err)
	}
	if h.BodyLen == 0 || h.BodyLen > 4096 {
		tcp.broken = true
		return "", 0, fmt.Errorf("SHM_INFO answer of %d bytes: %w", h.BodyLen, wire.StatusInvalid)
	}
	path := make([]byte, h.BodyLen)
	if err := tcp.readFull(path); err != nil {
		return "", 0, err
	}
	return string(path), h.Stored, nil
}

// shmConnect dials the node's socket at path, bootstraps (expecting node
// instance) and maps.
func (p *peer) shmConnect(ctx context.Context, deadline time.Time, path string, instance uint64) (_ *cconn, err error) {
	s := &p.shm
	var d net.Dialer
	dctx, cancel := context.WithDeadline(ctx, minTime(deadline, time.Now().Add(p.opts.DialTimeout)))
	defer cancel()
	nc, err := d.DialContext(dctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", path, err)
	}
	uc := nc.(*net.UnixConn)
	defer func() {
		if err != nil {
			nc.Close()
		}
	}()
	_ = nc.SetDeadline(minTime(deadline, time.Now().Add(p.opts.DialTimeout)))
	if _, err := nc.Write(wire.AppendLeaseHello(nil, wire.LeaseHello{Instance: instance})); err != nil {
		return nil, fmt.Errorf("lease hello to %s: %w", path, err)
	}
	w, files, err := shm.ReceiveWelcome(uc)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	_ = nc.SetDeadline(time.Time{})
	lc := &leaseConn{}
	if lc.staging, err = shm.Map(files[shm.FileStaging], w.StagingBytes, true); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock() // mapping is no I/O: the node's maps are shared, so made once under the lock
	if s.maps == nil || s.maps.instance != w.Instance {
		m := &shmMaps{instance: w.Instance, leaseTTL: time.Duration(w.LeaseMS) * time.Millisecond}
		if m.arena, err = shm.Map(files[shm.FileArena], w.ArenaBytes, false); err == nil {
			m.words, err = shm.Map(files[shm.FileWords], w.LeaseWords*8, false)
		}
		if err != nil {
			_ = shm.Unmap(m.arena)
			_ = shm.Unmap(lc.staging)
			return nil, err
		}
		s.maps = m // the previous instance's maps go with their last connection
	}
	lc.maps = s.maps
	lc.maps.refs++
	return &cconn{p: p, nc: nc, br: bufio.NewReaderSize(nc, 64<<10), lease: lc}, nil
}

// closeLease unmaps the connection's staging region, and the node's maps
// with their last connection.
func (cc *cconn) closeLease() {
	lc := cc.lease
	if lc == nil {
		return
	}
	cc.lease = nil
	_ = shm.Unmap(lc.staging)
	s := &cc.p.shm
	s.mu.Lock()
	lc.maps.refs--
	if lc.maps.refs == 0 {
		_ = shm.Unmap(lc.maps.arena)
		_ = shm.Unmap(lc.maps.words)
		if s.maps == lc.maps {
			s.maps = nil
		}
	}
	s.mu.Unlock()
}

// closeConn closes cc's socket and what it mapped.
func (cc *cconn) closeConn() error {
	err := cc.nc.Close()
	cc.closeLease()
	return err
}

// appendReleases appends the first n pending lease ids (n from
// releasable) to a lease request's body and drops them from pending: if
// the request fails, its connection closes, and the node ends every lease
// of a closed connection.
func (lc *leaseConn) appendReleases(dst []byte, n int) []byte {
	for _, id := range lc.pending[:n] {
		dst = binary.LittleEndian.AppendUint64(dst, uint64(id))
	}
	lc.pending = append(lc.pending[:0], lc.pending[n:]...)
	return dst
}

// releasable is how many pending ids the next lease request carries.
func (lc *leaseConn) releasable(max int) int { return min(len(lc.pending), max) }

// errLeaseLapsed is a lease item whose lease ended before the client's
// copy of its bytes was checked (the client was paused past the lease
// time): the bytes may be another value's, so the item is a miss.
var errLeaseLapsed = fmt.Errorf("the lease on the value ended before its bytes were copied out (the client was paused past server.lease_ms); answered as a miss: %w", wire.StatusNotFound)

// leaseGet serves getBatch's items idx over a shared-memory connection:
// one LEASE_GET, each record's bytes taken from the arena (leased) or
// the stream (inline) by take.
func (c *Client) leaseGet(cc *cconn, flags uint64, idx []int, ks []wire.BlockKey, res []GetResult, at, ask func(i int) uint64,
	take func(cc *cconn, i int, r *GetResult, n uint64) error) error {
	lc := cc.lease
	releases := lc.releasable(c.opts.MaxBatchItems)
	cc.wbuf = wire.AppendRequest(cc.wbuf, &wire.RequestHeader{Op: wire.OpLeaseGet, Key: wire.BlockKey{Tenant: flags}, Offset: uint64(releases), Length: uint64(len(idx)),
		BodyLen: uint64(releases)*wire.LeaseIDLen + uint64(len(idx))*wire.LeaseItemLen})
	cc.wbuf = lc.appendReleases(cc.wbuf, releases)
	for n, i := range idx {
		cc.wbuf = wire.AppendGetItem(cc.wbuf, ks[n], at(i), ask(i))
	}
	if err := cc.send(nil); err != nil {
		return err
	}
	if _, err := cc.readRecordsHeader(len(idx)); err != nil {
		return err
	}
	var rec [wire.LeaseRecordLen]byte
	for _, i := range idx {
		asked := ask(i)
		if err := cc.readFull(rec[:]); err != nil {
			return err
		}
		lr, err := wire.DecodeLeaseRecord(rec[:])
		if err != nil {
			cc.broken = true
			return err
		}
		r := &res[i]
		r.Stored = lr.Stored
		if lr.Status != wire.StatusOK {
			r.Err = statusErr(lr.Status)
			continue
		}
		if want, ok := wire.RangeLen(lr.Stored, at(i), asked); !ok || lr.Length != want {
			cc.broken = true
			return fmt.Errorf("LEASE_GET record of %d bytes for %d bytes at offset %d of a %d-byte value: %w", lr.Length, asked, at(i), lr.Stored, wire.StatusInvalid)
		}
		switch lr.Kind {
		case wire.LeaseNone:
			continue
		case wire.LeaseInline:
			if err := take(cc, i, r, lr.Length); err != nil {
				return err
			}
			continue
		}
		m := lc.maps
		if lr.Offset > uint64(len(m.arena)) || lr.Length > uint64(len(m.arena))-lr.Offset {
			cc.broken = true
			return fmt.Errorf("LEASE_GET lease of %d bytes at arena offset %d, past the %d-byte arena: %w", lr.Length, lr.Offset, len(m.arena), wire.StatusInvalid)
		}
		cc.arena = m.arena[lr.Offset : lr.Offset+lr.Length]
		err = take(cc, i, r, lr.Length)
		cc.arena = nil
		lc.pending = append(lc.pending, lr.Lease)
		if err != nil {
			return err
		}
		if afterLeaseCopy != nil {
			afterLeaseCopy()
		}
		if !leaseHeld(m, lr.Lease) {
			*r = GetResult{Stored: r.Stored, Err: errLeaseLapsed}
		}
	}
	return nil
}

// afterLeaseCopy, set only by tests, runs between the copy of a leased
// value and the check of its lease word: a test pauses there past the
// lease time, as a descheduled client would be.
var afterLeaseCopy func()

// leaseHeld reports whether lease id was still live after the copy out
// of its bytes: the seqlock's check. The atomic add orders the copy's
// loads before the word's load on weakly ordered CPUs too.
func leaseHeld(m *shmMaps, id wire.LeaseID) bool {
	var fence uint32
	atomic.AddUint32(&fence, 0)
	return m.word(id.Index()) == uint64(id)
}

// takeArena is readFull, readValue and discard for an item whose bytes
// are in the arena (cc.arena): they are copied, not read from the stream.
func (cc *cconn) takeArena(b []byte) error {
	if len(b) > len(cc.arena) {
		cc.broken = true
		return fmt.Errorf("reading %d bytes of a %d-byte leased value: %w", len(b), len(cc.arena), wire.StatusInvalid)
	}
	copy(b, cc.arena)
	cc.arena = cc.arena[len(b):]
	return nil
}

// leasePut stores the items idx with LEASE_PUT frames: as many values as
// the staging region holds per frame, each copied in by fill. A value
// larger than the whole staging region fails as TOO_LARGE for this path
// (the caller sends it over the stream instead).
func (c *Client) leasePut(cc *cconn, idx []int, ks []wire.BlockKey, errs []error, size func(i int) uint64, fill func(i int, dst []byte)) error {
	lc := cc.lease
	stage := uint64(len(lc.staging))
	for lo := 0; lo < len(idx); {
		hi, used := lo, uint64(0)
		for hi < len(idx) && hi-lo < c.opts.MaxBatchItems && used+size(idx[hi]) <= stage {
			used += size(idx[hi])
			hi++
		}
		if hi == lo {
			return fmt.Errorf("a %d-byte value does not fit the node's %d-byte staging region: %w", size(idx[lo]), stage, wire.StatusTooLarge)
		}
		releases := lc.releasable(c.opts.MaxBatchItems)
		cc.wbuf = wire.AppendRequest(cc.wbuf, &wire.RequestHeader{Op: wire.OpLeasePut, Offset: uint64(releases), Length: uint64(hi - lo),
			BodyLen: uint64(releases)*wire.LeaseIDLen + uint64(hi-lo)*wire.LeaseItemLen})
		cc.wbuf = lc.appendReleases(cc.wbuf, releases)
		off := uint64(0)
		for n := lo; n < hi; n++ {
			i := idx[n]
			sz := size(i)
			fill(i, lc.staging[off:off+sz])
			cc.wbuf = wire.AppendGetItem(cc.wbuf, ks[n], off, sz)
			off += sz
		}
		if err := cc.send(nil); err != nil {
			return err
		}
		if err := cc.readPutRecords(idx[lo:hi], errs); err != nil {
			return err
		}
		lo = hi
	}
	return nil
}

// fitsStaging reports whether every value of idx fits the connection's
// staging region (leasePut sends as many per frame as fit).
func fitsStaging(cc *cconn, idx []int, size func(i int) uint64) bool {
	for _, i := range idx {
		if size(i) > uint64(len(cc.lease.staging)) {
			return false
		}
	}
	return true
}

// singleIdx is the index list of a one-item call.
var singleIdx = []int{0}
