package server

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dfkv/dfkv/config"
	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/engine/lease"
	"github.com/dfkv/dfkv/wire"
	"github.com/dfkv/dfkv/wire/shm"
)

// ShmOptions turn on the lease protocol over shared memory for clients on
// the node's host: they connect to a Unix socket, receive the node's
// memory files, and read resident values out of the RAM arena
// themselves under leases (LEASE_GET), and write values into their own
// staging region for the node to store (LEASE_PUT). Everything the TCP
// port serves is served on the socket too.
type ShmOptions struct {
	// Listener is a Unix-socket listener; Path is its path as clients
	// are told it (SHM_INFO on the TCP port).
	Listener net.Listener
	Path     string
	// Arena is the RAM tier when it shares its arena (nil: no tier, and
	// every LEASE_GET item comes back inline on the socket).
	Arena ArenaSharer
	// LeaseTTL is how long a lease lives unless released; LeaseMax how
	// many may be live at once.
	LeaseTTL time.Duration
	LeaseMax int
	// StagingBytes is the size of each connection's staging region: the
	// most value bytes one LEASE_PUT can carry.
	StagingBytes uint64
}

// ArenaSharer is a RAM tier with a shared arena (ramtier.Tier).
type ArenaSharer interface {
	engine.LeaseLender
	ArenaFile() *os.File
	ArenaBytes() uint64
	ArenaOffset(b []byte) (uint64, bool)
}

// shmNode is the node's side of the shared-memory transport: the files
// every client gets and the lease table.
type shmNode struct {
	opts     ShmOptions
	instance uint64
	arenaRO  *os.File // the arena, opened read-only (an empty file without a tier)
	words    *os.File
	wordsRO  *os.File
	wordsMem []byte
	leases   *lease.Table // nil without a tier: nothing is leased
	owners   atomic.Uint64
	conns    atomic.Int64
}

// newShmNode makes the files and the lease table.
func newShmNode(o *ShmOptions) (_ *shmNode, err error) {
	if o.StagingBytes == 0 || o.StagingBytes > 1<<40 {
		return nil, fmt.Errorf("server: staging region of %d bytes: want 1 byte to 1 TiB", o.StagingBytes)
	}
	if o.LeaseMax <= 0 {
		o.LeaseMax = 1 // before the copy: the welcome announces n.opts.LeaseMax words
	}
	n := &shmNode{opts: *o}
	defer func() {
		if err != nil {
			n.close()
		}
	}()
	var b [8]byte
	_, _ = rand.Read(b[:])
	n.instance = binary.LittleEndian.Uint64(b[:]) | 1
	if o.Arena != nil && o.Arena.ArenaFile() != nil {
		if n.arenaRO, err = shm.ReadOnly(o.Arena.ArenaFile()); err != nil {
			return nil, err
		}
	} else if n.arenaRO, err = shm.Memfd("dfkv-arena", 0); err != nil {
		return nil, err
	}
	size := (uint64(o.LeaseMax)*8 + 4095) &^ 4095
	if n.words, err = shm.MemfdForReaders("dfkv-lease-words", size); err != nil {
		return nil, err
	}
	if n.wordsMem, err = shm.Map(n.words, size, true); err != nil {
		return nil, err
	}
	_ = shm.SealWrites(n.words) // checked with the arena's seal below
	if n.wordsRO, err = shm.ReadOnly(n.words); err != nil {
		return nil, err
	}
	if o.Arena != nil && o.Arena.ArenaFile() != nil {
		n.leases, err = lease.New(lease.Options{Lender: o.Arena, Capacity: o.LeaseMax, TTL: o.LeaseTTL, Words: n.wordsMem,
			OwnerMax: max(1, o.LeaseMax/lease.ConnShare), OwnerBytes: o.Arena.ArenaBytes() / lease.ConnShare})
		if err != nil {
			return nil, fmt.Errorf("server: %w", err)
		}
	}
	return n, nil
}

// close ends every lease (returning its loan to the tier) and closes the
// files; clients keep what they mapped until they unmap it.
func (n *shmNode) close() {
	if n.leases != nil {
		n.leases.Close()
	}
	_ = shm.Unmap(n.wordsMem)
	for _, f := range []*os.File{n.arenaRO, n.words, n.wordsRO} {
		if f != nil {
			_ = f.Close()
		}
	}
}

// shmConn is one shared-memory connection's own state.
type shmConn struct {
	owner   uint64 // its leases' owner in the table
	staging *os.File
	mem     []byte // the staging region, mapped
	idx     []int  // LEASE_PUT scratch: the items stored
}

// bootstrap reads the client's hello, answers with the welcome and the
// memory files, and sets up the connection's staging region. A refused
// hello is answered with the reason and ends the connection.
func (c *conn) bootstrap() error {
	n := c.s.shm
	uc, ok := c.nc.(*net.UnixConn)
	if !ok {
		return fmt.Errorf("shared-memory connection is not a Unix socket")
	}
	var hello [wire.LeaseHelloLen]byte
	if _, err := io.ReadFull(c.br, hello[:]); err != nil {
		return err
	}
	h, err := wire.DecodeLeaseHello(hello[:])
	if err == nil && h.Instance != 0 && h.Instance != n.instance {
		err = &wire.FrameError{Status: wire.StatusUnavailable, Message: fmt.Sprintf("the client expects node instance %#x, this is %#x: the node restarted; reconnect", h.Instance, n.instance)}
	}
	if err != nil {
		var fe *wire.FrameError
		errors.As(err, &fe)
		c.s.stats.frameErrors.Add(1)
		c.s.frameWarn.Warn(c.s.log, time.Now(), "refusing shared-memory connection", "status", fe.Status.String(), "error", fe.Message)
		_ = c.nc.SetWriteDeadline(c.s.opts.Clock.Now().Add(time.Second))
		_ = shm.SendRefusal(c.nc, fe.Status, fe.Message)
		return io.EOF // answered; end quietly
	}
	sc := &shmConn{owner: n.owners.Add(1)}
	if sc.staging, err = shm.Memfd("dfkv-staging", n.opts.StagingBytes); err == nil {
		sc.mem, err = shm.Map(sc.staging, n.opts.StagingBytes, true)
	}
	if err != nil {
		sc.close()
		c.s.log.Error("shared-memory connection: cannot make its staging region", "bytes", n.opts.StagingBytes, "err", err)
		_ = shm.SendRefusal(c.nc, wire.StatusUnavailable, "the node could not make a staging region: "+err.Error())
		return io.EOF
	}
	w := wire.LeaseWelcome{Status: wire.StatusOK, LeaseMS: uint32(n.opts.LeaseTTL.Milliseconds()), Instance: n.instance,
		StagingBytes: n.opts.StagingBytes, LeaseWords: uint64(n.opts.LeaseMax)}
	if n.leases != nil {
		w.ArenaBytes = n.opts.Arena.ArenaBytes()
	}
	c.armWrite()
	if err := shm.SendWelcome(uc, w, [3]*os.File{n.arenaRO, n.wordsRO, sc.staging}); err != nil {
		sc.close()
		return err
	}
	c.lease = sc
	n.conns.Add(1)
	return nil
}

// endLease releases what the connection leased and unmaps its staging.
func (c *conn) endLease() {
	if c.lease == nil {
		return
	}
	if c.s.shm.leases != nil {
		c.s.shm.leases.ReleaseOwner(c.lease.owner)
	}
	c.lease.close()
	c.lease = nil
	c.s.shm.conns.Add(-1)
}

func (sc *shmConn) close() {
	_ = shm.Unmap(sc.mem)
	if sc.staging != nil {
		_ = sc.staging.Close()
	}
}

// releaseIDs ends the leases whose ids lead a lease op's body. Ids that
// ended already are normal (expired first); others' ids are counted by
// the table and release nothing.
func (c *conn) releaseIDs(ids []byte) int {
	t := c.s.shm.leases
	if t == nil {
		return 0
	}
	n := 0
	for i := 0; i+wire.LeaseIDLen <= len(ids); i += wire.LeaseIDLen {
		if t.Release(c.lease.owner, wire.LeaseID(binary.LittleEndian.Uint64(ids[i:]))) == nil {
			n++
		}
	}
	return n
}

// leaseOp serves LEASE_GET, RELEASE and LEASE_PUT.
func (c *conn) leaseOp(h *wire.RequestHeader) error {
	if c.lease == nil {
		c.unread = h.BodyLen
		return &wire.FrameError{Status: wire.StatusUnsupported, Message: fmt.Sprintf("%s is served only on the node's shared-memory socket (server.shm_socket), after the lease hello", h.Op)}
	}
	r, n := int(h.Offset), int(h.Length)
	body, err := c.readTable(int(h.BodyLen))
	if err != nil {
		return err
	}
	released := c.releaseIDs(body[:r*wire.LeaseIDLen])
	items := body[r*wire.LeaseIDLen:]
	switch h.Op {
	case wire.OpRelease:
		c.respond(wire.StatusOK, uint64(released), nil)
		return nil
	case wire.OpLeasePut:
		c.leasePut(items, n)
		return nil
	}
	c.wbuf = wire.AppendResponse(c.wbuf, &wire.ResponseHeader{Status: wire.StatusOK, Stored: uint64(n)})
	for i := range n {
		k, off, length := wire.DecodeGetItem(items[i*wire.LeaseItemLen:])
		leased, data, stored := c.tryLease(k, off, length, true)
		if leased {
			c.s.pins.read(k)
			continue
		}
		var err error
		if data == nil {
			data, stored, err = c.read(k, off, length)
		}
		c.s.pins.read(k)
		if err != nil {
			c.release()
			c.wbuf = wire.AppendLeaseRecord(c.wbuf, wire.StatusOf(err), stored, wire.LeaseNone, 0, 0, 0)
			continue
		}
		if len(data) == 0 {
			c.release()
			c.wbuf = wire.AppendLeaseRecord(c.wbuf, wire.StatusOK, stored, wire.LeaseNone, 0, 0, 0)
			continue
		}
		if h.Key.Tenant&wire.LeaseFlagPromote != 0 && !c.onLoan && c.leaseAfterRead(k, off, length) {
			// The read filled RAM (a miss is read whole into an arena
			// slot): that slot is leased instead of the bytes sent.
			c.release()
			continue
		}
		c.wbuf = wire.AppendLeaseRecord(c.wbuf, wire.StatusOK, stored, wire.LeaseInline, 0, uint64(len(data)), 0)
		err = c.writePayload(data)
		c.release()
		if err != nil {
			return err
		}
	}
	return nil
}

// tryLease leases key's resident bytes in the arena and queues the
// record (leased). When every lease is live, the bytes it lent are
// returned for the caller to send inline, under the connection's loan as
// read would hold them, so the GET reads RAM (and counts as a hit) once.
// Nothing leased and no data: the bytes are not resident in the arena,
// or too many leases hold them; the caller reads.
func (c *conn) tryLease(k wire.BlockKey, off, length uint64, hit bool) (leased bool, data []byte, stored uint64) {
	n := c.s.shm
	if n.leases == nil {
		return false, nil, 0
	}
	data, stored, loan, ok, err := n.opts.Arena.LendLease(k, off, length, hit)
	if !ok {
		return false, nil, 0
	}
	if err != nil || len(data) == 0 {
		if len(data) > 0 {
			n.opts.Arena.Return(loan)
		}
		c.wbuf = wire.AppendLeaseRecord(c.wbuf, wire.StatusOf(err), stored, wire.LeaseNone, 0, 0, 0)
		return true, nil, 0
	}
	at, inArena := n.opts.Arena.ArenaOffset(data)
	if inArena {
		if id, _, granted := n.leases.Grant(c.lease.owner, loan, max(stored, uint64(len(data)))); granted {
			c.wbuf = wire.AppendLeaseRecord(c.wbuf, wire.StatusOK, stored, wire.LeaseArena, at, uint64(len(data)), id)
			return true, nil, 0
		}
	}
	if !hit {
		n.opts.Arena.Return(loan)
		return false, nil, 0
	}
	c.loan, c.onLoan = loan, true
	return false, data, stored
}

// leaseAfterRead leases the arena slot a read just filled, counting no
// hit (the read counted its miss); false when it could not, with nothing
// held: the caller sends the bytes it read.
func (c *conn) leaseAfterRead(k wire.BlockKey, off, length uint64) bool {
	leased, _, _ := c.tryLease(k, off, length, false)
	return leased
}

// leasePut stores the values the client wrote into its staging region.
// Each item names its range; one out of the region or of the value size
// limits is that item's error. The client must not change a value's
// bytes until the answer: the node copies them during the request.
func (c *conn) leasePut(items []byte, n int) {
	stage := c.lease.mem
	st := c.statuses(n)
	c.keys, c.vals, c.errs = c.keys[:0], c.vals[:0], c.errs[:0]
	idx := c.lease.idx[:0]
	for i := range n {
		k, off, length := wire.DecodeGetItem(items[i*wire.LeaseItemLen:])
		if v := wire.StagedItemStatus(off, length, uint64(len(stage)), c.s.opts.MaxBlockBytes); v != wire.StatusOK {
			st[i] = byte(v)
			continue
		}
		c.keys = append(c.keys, k)
		c.vals = append(c.vals, stage[off:off+length:off+length])
		idx = append(idx, i)
	}
	if len(c.keys) > 0 {
		for range c.keys {
			c.errs = append(c.errs, nil)
		}
		c.s.opts.Engine.PutBatch(c.keys, c.vals, c.errs)
		for j, i := range idx {
			st[i] = byte(wire.StatusOf(c.errs[j]))
		}
	}
	clear(c.vals)
	c.lease.idx = idx
	c.wbuf = wire.AppendResponse(c.wbuf, &wire.ResponseHeader{Status: wire.StatusOK, Stored: uint64(n)})
	c.wbuf = append(c.wbuf, st...)
}

// shmInfo answers SHM_INFO on the TCP port: the socket's path and the
// node instance, or NOT_FOUND when the node has no shared-memory socket.
func (c *conn) shmInfo() {
	n := c.s.shm
	if n == nil {
		c.respond(wire.StatusNotFound, 0, nil)
		return
	}
	c.wbuf = wire.AppendResponse(c.wbuf, &wire.ResponseHeader{Status: wire.StatusOK, Stored: n.instance, BodyLen: uint64(len(n.opts.Path))})
	c.wbuf = append(c.wbuf, n.opts.Path...)
}

// ShmStats are the shared-memory transport's numbers.
type ShmStats struct {
	Conns  int64       `json:"conns"`
	Leases lease.Stats `json:"leases"`
}

// shmRefuse answers a shared-memory connection the node will not serve.
func shmRefuse(nc net.Conn, st wire.Status, msg string) error { return shm.SendRefusal(nc, st, msg) }

// listenShm listens on the shared-memory socket at path with the given
// octal mode. A socket file left by a node that is gone is replaced; one
// a running node answers on, or a file that is not a socket, is an error.
func listenShm(path, mode string) (net.Listener, error) {
	perm, err := config.ParseFileMode(mode)
	if err != nil {
		return nil, fmt.Errorf("server.shm_socket_mode %q %v", mode, err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("server.shm_socket %s exists and is not a socket; remove it or choose another path", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("server.shm_socket %s is in use by a running process (another dfkv node?); stop it or choose another path", path)
		} else if !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("server.shm_socket %s exists and cannot be checked (%v); remove it if no node uses it", path, err)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("server.shm_socket %s: removing the stale socket of a stopped node: %w", path, err)
		}
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on server.shm_socket %s: %w (is its directory there and writable?)", path, err)
	}
	if err := os.Chmod(path, perm); err != nil {
		ln.Close()
		return nil, fmt.Errorf("server.shm_socket %s: setting its mode %s: %w", path, mode, err)
	}
	return ln, nil
}

// shmOptions are the server's shared-memory options from the settings,
// or nil without server.shm_socket.
func (n *node) shmOptions() *ShmOptions {
	if n.shmLn == nil {
		return nil
	}
	o := &ShmOptions{Listener: n.shmLn, Path: n.sc.ShmSocket, LeaseTTL: n.sc.Lease, LeaseMax: n.sc.LeaseMax, StagingBytes: n.sc.ShmStagingBytes}
	if n.tier != nil {
		o.Arena = n.tier
		if f := n.tier.ArenaFile(); f != nil && !shm.WritesSealed(f) {
			n.log.Warn("this kernel cannot seal the shared RAM arena against writes (F_SEAL_FUTURE_WRITE, Linux 5.1): a process on the socket could write values and lease words in place; keep server.shm_socket_mode tight")
		}
	} else {
		n.log.Warn("server.shm_socket without the RAM tier: clients on this host use the socket, but nothing is leased; values travel on it as on TCP")
	}
	n.log.Info("shared memory for clients on this host", "socket", n.sc.ShmSocket, "mode", n.sc.ShmSocketMode,
		"lease_ms", n.sc.Lease.Milliseconds(), "lease_max", n.sc.LeaseMax, "staging_bytes", n.sc.ShmStagingBytes)
	return o
}

// ShmStats returns the shared-memory transport's numbers, or nil when it
// is off.
func (s *Server) ShmStats() *ShmStats {
	n := s.shm
	if n == nil {
		return nil
	}
	st := &ShmStats{Conns: n.conns.Load()}
	if n.leases != nil {
		st.Leases = n.leases.Stats()
	}
	return st
}

// shmCollector exports the lease transports' numbers (shared memory,
// RDMA) and the pins'; without them no dfkv_shm_*, dfkv_lease_*,
// dfkv_rdma_* or dfkv_pin_* series exist.
type shmCollector struct{ srv *Server }

var (
	descShmConns      = prometheus.NewDesc("dfkv_shm_conns", "Open shared-memory connections.", nil, nil)
	descLeaseLive     = prometheus.NewDesc("dfkv_lease_live", "Leases on resident values held by clients now.", nil, nil)
	descLeaseGranted  = prometheus.NewDesc("dfkv_lease_granted_total", "Leases granted.", nil, nil)
	descLeaseReleased = prometheus.NewDesc("dfkv_lease_released_total", "Leases released by their clients (or their connections closing).", nil, nil)
	descLeaseExpired  = prometheus.NewDesc("dfkv_lease_expired_total", "Leases that ran out (server.lease_ms): a client that hung or forgot to release.", nil, nil)
	descLeaseRefused  = prometheus.NewDesc("dfkv_lease_refused_total", "Releases of leases another connection holds, or of ids the node never issued (forged); expired ids are not counted.", nil, nil)
	descLeaseFull     = prometheus.NewDesc("dfkv_lease_full_total", "Values sent on the socket because every lease was live (server.lease_max).", nil, nil)
	descLeaseConnFull = prometheus.NewDesc("dfkv_lease_conn_full_total", "Values sent on the socket because their connection's live leases already numbered an eighth of server.lease_max or covered an eighth of the RAM arena.", nil, nil)
	descPinLive       = prometheus.NewDesc("dfkv_pin_live", "Values a BATCH_EXIST with the pin flag keeps from eviction until a GET reads them.", nil, nil)
	descPinGranted    = prometheus.NewDesc("dfkv_pin_granted_total", "Pins taken by BATCH_EXIST with the pin flag.", nil, nil)
	descRDMAConns     = prometheus.NewDesc("dfkv_rdma_conns", "Open RDMA connections.", nil, nil)
	descRDMALeaseLive = prometheus.NewDesc("dfkv_rdma_lease_live", "Leases RDMA clients hold now.", nil, nil)
	descRDMAExpired   = prometheus.NewDesc("dfkv_rdma_lease_expired_total", "RDMA leases that ran out (server.lease_ms): a client that hung or forgot to release.", nil, nil)
	descRDMARefused   = prometheus.NewDesc("dfkv_rdma_lease_refused_total", "Releases over RDMA of leases another connection holds, or of ids the node never issued (forged); expired ids are not counted.", nil, nil)
	descPinExpired    = prometheus.NewDesc("dfkv_pin_expired_total", "Pins that ran out (server.lease_ms) before a GET read their value: lookups not followed by a load.", nil, nil)
)

func (c *shmCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descShmConns, descLeaseLive, descLeaseGranted, descLeaseReleased, descLeaseExpired, descLeaseRefused, descLeaseFull, descLeaseConnFull,
		descPinLive, descPinGranted, descPinExpired, descRDMAConns, descRDMALeaseLive, descRDMAExpired, descRDMARefused} {
		ch <- d
	}
}

func (c *shmCollector) Collect(ch chan<- prometheus.Metric) {
	g := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	k := func(d *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	if p := c.srv.pins; p != nil {
		st := p.table.Stats()
		g(descPinLive, float64(st.Live))
		k(descPinGranted, st.Granted)
		k(descPinExpired, st.Expired)
	}
	if r := c.srv.opts.RDMA; r != nil {
		st := r.Stats()
		g(descRDMAConns, float64(st.Conns))
		g(descRDMALeaseLive, float64(st.Leases.Live))
		k(descRDMAExpired, st.Leases.Expired)
		k(descRDMARefused, st.Leases.Refused)
	}
	st := c.srv.ShmStats()
	if st == nil {
		return
	}
	g(descShmConns, float64(st.Conns))
	g(descLeaseLive, float64(st.Leases.Live))
	k(descLeaseGranted, st.Leases.Granted)
	k(descLeaseReleased, st.Leases.Released)
	k(descLeaseExpired, st.Leases.Expired)
	k(descLeaseRefused, st.Leases.Refused)
	k(descLeaseFull, st.Leases.Full)
	k(descLeaseConnFull, st.Leases.OwnerFull)
}
