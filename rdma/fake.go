package rdma

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Fake is an in-process Provider: not hardware, and no kernel RDMA. It is
// what the transport's tests run on (machines without RDMA devices run
// them too), and it keeps the rules the transport depends on:
//
//   - a READ or WRITE must present the rkey of a live region of the
//     peer's PD and stay inside it, and its local buffer must lie in a
//     live region of its own PD under lkey; otherwise it completes with
//     a remote access (or local protection) error and touches no memory;
//   - QPs are connected in pairs within the process; the work requests
//     of one QP execute in order on one goroutine (memcpy), and their
//     completions are delivered in that order;
//   - after an error completion the QP is in the error state and later
//     work requests complete as flushed.
//
// An aligned 8-byte READ is one atomic load, as a NIC does not tear an
// aligned word (the lease words are written atomically by the node).
//
// Faults are injected with SetHook: the hook sees each work request
// before it executes and may block (a delay, or a pause a test releases
// later) or break the connection (the request and every later one of
// both QPs complete as flushed). Unlike hardware, the Fake never recycles
// keys: every registration gets fresh ones.
type Fake struct {
	mu      sync.Mutex
	devices []*fakeDevice
	qps     map[fakeAddr]*fakeQP
	nextKey uint32
	nextQPN uint32
	hook    atomic.Pointer[func(FakeOp) FakeFault]
}

// FakeOp is a work request as a Fake hook sees it, before it executes.
type FakeOp struct {
	Device string
	QPN    uint32
	ID     uint64
	Op     Opcode
	Len    int
	Remote uint64
	RKey   uint32
}

// FakeFault is what a hook asks the Fake to do with a work request.
type FakeFault uint8

const (
	// FaultNone executes the request.
	FaultNone FakeFault = iota
	// FaultBreak breaks the connection first: both QPs enter the error
	// state, and this request and every later one complete as flushed.
	FaultBreak
)

type fakeAddr struct {
	gid [16]byte
	qpn uint32
}

// NewFake makes a Fake with devices of the given names (none: one called
// "fake0"). Each device has one ACTIVE port with its own LID and GID.
func NewFake(names ...string) *Fake {
	if len(names) == 0 {
		names = []string{"fake0"}
	}
	f := &Fake{qps: map[fakeAddr]*fakeQP{}, nextKey: 0x100, nextQPN: 0x10}
	for i, n := range names {
		d := &fakeDevice{f: f, name: n, lid: uint16(i + 1), mrs: map[uint32]*fakeMR{}}
		copy(d.gid[:], "fe80fake")
		d.gid[15] = byte(i + 1)
		f.devices = append(f.devices, d)
	}
	return f
}

// NewFakeNone is a Fake without devices (Open fails as on a host with
// no RDMA device).
func NewFakeNone() *Fake { return &Fake{qps: map[fakeAddr]*fakeQP{}} }

// SetHook sets (nil: clears) the function every work request passes
// before it executes. It runs on the QP's goroutine, outside the Fake's
// locks: it may block.
func (f *Fake) SetHook(h func(FakeOp) FakeFault) {
	if h == nil {
		f.hook.Store(nil)
		return
	}
	f.hook.Store(&h)
}

// Registered is how many memory regions are registered (tests check
// that connections deregister theirs).
func (f *Fake) Registered() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, d := range f.devices {
		n += len(d.mrs) / 2 // each region is there under both keys
	}
	return n
}

// Open implements Provider.
func (f *Fake) Open(name string) (Device, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.devices) == 0 {
		return nil, errors.New("no RDMA device: the fake provider has none")
	}
	if name == "" {
		return f.devices[0], nil
	}
	var names []string
	for _, d := range f.devices {
		if d.name == name {
			return d, nil
		}
		names = append(names, d.name)
	}
	return nil, fmt.Errorf("no RDMA device named %q (there are %s)", name, strings.Join(names, ", "))
}

type fakeDevice struct {
	f    *Fake
	name string
	lid  uint16
	gid  [16]byte
	mrs  map[uint32]*fakeMR // by lkey and by rkey (under f.mu)
}

func (d *fakeDevice) Name() string         { return d.name }
func (d *fakeDevice) AllocPD() (PD, error) { return &fakePD{dev: d}, nil }
func (d *fakeDevice) Close() error         { return nil }

type fakePD struct {
	dev    *fakeDevice
	closed bool
}

type fakeMR struct {
	pd         *fakePD
	buf        []byte
	addr       uint64
	access     Access
	lkey, rkey uint32
}

func (p *fakePD) Register(buf []byte, access Access) (MR, error) {
	if len(buf) == 0 {
		return nil, errors.New("registering an empty region")
	}
	f := p.dev.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if p.closed {
		return nil, errors.New("register on a closed protection domain")
	}
	f.nextKey++
	m := &fakeMR{pd: p, buf: buf, addr: uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf)))), access: access,
		lkey: f.nextKey<<8 | 0x11, rkey: f.nextKey<<8 | 0x22}
	p.dev.mrs[m.lkey], p.dev.mrs[m.rkey] = m, m
	return m, nil
}

func (p *fakePD) CreateQP(depth int) (QP, error) {
	if depth <= 0 {
		return nil, fmt.Errorf("queue pair of depth %d", depth)
	}
	f := p.dev.f
	f.mu.Lock()
	f.nextQPN++
	q := &fakeQP{f: f, pd: p, depth: depth, work: make(chan WorkRequest, depth), stop: make(chan struct{})}
	q.ep = Endpoint{QPN: f.nextQPN & 0xffffff, PSN: (f.nextQPN * 7919) & 0xffffff, LID: p.dev.lid, GID: p.dev.gid}
	f.qps[fakeAddr{p.dev.gid, q.ep.QPN}] = q
	f.mu.Unlock()
	q.wg.Add(1)
	go q.run()
	return q, nil
}

func (p *fakePD) Close() error {
	p.dev.f.mu.Lock()
	p.closed = true
	p.dev.f.mu.Unlock()
	return nil
}

func (m *fakeMR) Addr() uint64 { return m.addr }
func (m *fakeMR) Len() uint64  { return uint64(len(m.buf)) }
func (m *fakeMR) LKey() uint32 { return m.lkey }
func (m *fakeMR) RKey() uint32 { return m.rkey }

// Deregister waits for a work request using the region to finish: the
// Fake copies under its lock, so after Deregister nothing touches buf.
func (m *fakeMR) Deregister() error {
	f := m.pd.dev.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if m.pd.dev.mrs[m.lkey] != m {
		return errors.New("deregistering a region twice")
	}
	delete(m.pd.dev.mrs, m.lkey)
	delete(m.pd.dev.mrs, m.rkey)
	return nil
}

const (
	qpReset = iota
	qpReady
	qpError
	qpClosed
)

type fakeQP struct {
	f     *Fake
	pd    *fakePD
	ep    Endpoint
	depth int
	work  chan WorkRequest
	stop  chan struct{}
	wg    sync.WaitGroup

	mu          sync.Mutex
	state       int
	peer        *fakeQP
	outstanding int
	done        []Completion
}

func (q *fakeQP) Endpoint() Endpoint { return q.ep }

func (q *fakeQP) Connect(remote Endpoint) error {
	q.f.mu.Lock()
	peer := q.f.qps[fakeAddr{remote.GID, remote.QPN}]
	q.f.mu.Unlock()
	if peer == nil || peer.ep != remote {
		return fmt.Errorf("connect: no queue pair %#x at the peer's address (LID %d)", remote.QPN, remote.LID)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.state != qpReset {
		return errors.New("connect: queue pair is not new")
	}
	q.state, q.peer = qpReady, peer
	return nil
}

func (q *fakeQP) Post(wr WorkRequest) error {
	if wr.Op != OpRead && wr.Op != OpWrite {
		return fmt.Errorf("post: unknown opcode %d", wr.Op)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case q.state == qpReset:
		return errors.New("post: queue pair not connected")
	case q.state == qpClosed:
		return errors.New("post: queue pair closed")
	case q.outstanding >= q.depth:
		return fmt.Errorf("post: send queue full (%d outstanding)", q.outstanding)
	}
	q.outstanding++
	q.work <- wr // never blocks: the channel holds depth
	return nil
}

func (q *fakeQP) Poll(dst []Completion) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := copy(dst, q.done)
	q.done = append(q.done[:0], q.done[n:]...)
	q.outstanding -= n
	return n, nil
}

func (q *fakeQP) Close() error {
	q.mu.Lock()
	if q.state == qpClosed {
		q.mu.Unlock()
		return nil
	}
	q.state = qpClosed
	q.mu.Unlock()
	close(q.stop)
	q.wg.Wait()
	q.f.mu.Lock()
	delete(q.f.qps, fakeAddr{q.pd.dev.gid, q.ep.QPN})
	q.f.mu.Unlock()
	return nil
}

// breakConn puts q and its peer in the error state.
func (q *fakeQP) breakConn() {
	q.mu.Lock()
	peer := q.peer
	if q.state != qpClosed {
		q.state = qpError
	}
	q.mu.Unlock()
	if peer != nil {
		peer.mu.Lock()
		if peer.state == qpReady {
			peer.state = qpError
		}
		peer.mu.Unlock()
	}
}

// run executes q's work requests in order until Close.
func (q *fakeQP) run() {
	defer q.wg.Done()
	for {
		select {
		case <-q.stop:
			return
		case wr := <-q.work:
			st := q.exec(wr)
			q.mu.Lock()
			if st != WCSuccess && q.state == qpReady {
				q.state = qpError
			}
			q.done = append(q.done, Completion{ID: wr.ID, Op: wr.Op, Status: st})
			q.mu.Unlock()
		}
	}
}

func (q *fakeQP) exec(wr WorkRequest) WCStatus {
	if h := q.f.hook.Load(); h != nil {
		op := FakeOp{Device: q.pd.dev.name, QPN: q.ep.QPN, ID: wr.ID, Op: wr.Op, Len: len(wr.Local), Remote: wr.Remote, RKey: wr.RKey}
		if (*h)(op) == FaultBreak {
			q.breakConn()
		}
	}
	q.mu.Lock()
	state, peer := q.state, q.peer
	q.mu.Unlock()
	if state != qpReady {
		return WCFlushed
	}
	peer.mu.Lock()
	peerState := peer.state
	peer.mu.Unlock()
	if peerState == qpClosed {
		return WCRetryExceeded
	}
	if peerState == qpError {
		return WCFlushed
	}
	f := q.f
	f.mu.Lock() // held across the copy: Deregister cannot overtake it
	defer f.mu.Unlock()
	local := q.pd.dev.mrs[wr.LKey]
	if local == nil || local.pd != q.pd || local.lkey != wr.LKey || !inside(local, addrOf(wr.Local), uint64(len(wr.Local))) ||
		(wr.Op == OpRead && local.access&AccessLocalWrite == 0) {
		return WCLocalProtection
	}
	need := AccessRemoteRead
	if wr.Op == OpWrite {
		need = AccessRemoteWrite
	}
	remote := peer.pd.dev.mrs[wr.RKey]
	if remote == nil || remote.pd != peer.pd || remote.rkey != wr.RKey || remote.access&need == 0 || !inside(remote, wr.Remote, uint64(len(wr.Local))) {
		return WCRemoteAccess
	}
	off := wr.Remote - remote.addr
	far := remote.buf[off : off+uint64(len(wr.Local))]
	if wr.Op == OpWrite {
		copy(far, wr.Local)
		return WCSuccess
	}
	if len(far) == 8 && wr.Remote%8 == 0 && addrOf(wr.Local)%8 == 0 {
		v := atomic.LoadUint64((*uint64)(unsafe.Pointer(&far[0])))
		*(*uint64)(unsafe.Pointer(&wr.Local[0])) = v
		return WCSuccess
	}
	copy(wr.Local, far)
	return WCSuccess
}

func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }

// inside reports whether [addr, addr+n) lies in m.
func inside(m *fakeMR, addr, n uint64) bool {
	return n > 0 && addr >= m.addr && n <= uint64(len(m.buf)) && addr-m.addr <= uint64(len(m.buf))-n
}
