package sim

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// Net is an in-memory network of named hosts. Every byte written on a
// connection is delivered to its peer after a latency drawn from the
// world's seed, the hosts, the moment and the bytes themselves
// (latencyOf), so the delivery instants of a run depend on its seed
// alone. A connection's bytes arrive in order (as TCP's do); bytes of
// different connections interleave by their delivery instants, which is
// how a seed reorders requests that race each other across connections.
//
// Faults: a partition between two hosts black-holes what either sends
// the other and makes dials between them hang until their deadline; a
// host that is reset has every connection fail with ECONNRESET; a slow
// host has a latency added to every byte it sends or receives.
type Net struct {
	seed uint64

	mu        sync.Mutex
	listeners map[string]*Listener // by "host:port"
	dials     map[string]int       // "from>to" → dials so far, to name connections
	conns     map[*halfConn]struct{}
	cut       map[[2]string]bool // unordered host pairs that cannot talk
	down      map[string]bool    // hosts cut from every other
	slow      map[string]time.Duration
	latency   [2]time.Duration // base latency range [min, max)

	// Trace, if set before any traffic, is told of every dial and write.
	Trace func(event string)
}

// NewNet returns a network whose latencies derive from seed.
func NewNet(seed uint64) *Net {
	return &Net{
		seed: seed, listeners: map[string]*Listener{}, dials: map[string]int{}, conns: map[*halfConn]struct{}{},
		cut: map[[2]string]bool{}, down: map[string]bool{}, slow: map[string]time.Duration{},
		latency: [2]time.Duration{50 * time.Microsecond, 500 * time.Microsecond},
	}
}

func pair(a, b string) [2]string {
	if a > b {
		a, b = b, a
	}
	return [2]string{a, b}
}

// Partition cuts (or, with cut false, heals) the link between hosts a and b.
func (n *Net) Partition(a, b string, cut bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if cut {
		n.cut[pair(a, b)] = true
	} else {
		delete(n.cut, pair(a, b))
	}
}

// Down cuts host from every other host (or, with down false, undoes
// that), as a machine that lost power or its link does.
func (n *Net) Down(host string, down bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if down {
		n.down[host] = true
	} else {
		delete(n.down, host)
	}
}

// HealAll removes every partition and slow host.
func (n *Net) HealAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cut = map[[2]string]bool{}
	n.down = map[string]bool{}
	n.slow = map[string]time.Duration{}
}

// Slow adds d to the latency of everything host sends or receives (0: no
// longer slow).
func (n *Net) Slow(host string, d time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if d <= 0 {
		delete(n.slow, host)
	} else {
		n.slow[host] = d
	}
}

// Reset fails every connection to or from host with ECONNRESET, as a
// crashed process's kernel (or a middlebox) would.
func (n *Net) Reset(host string) {
	n.mu.Lock()
	var hit []*halfConn
	for c := range n.conns {
		if c.local.host == host || c.remote.host == host {
			hit = append(hit, c)
		}
	}
	n.mu.Unlock()
	for _, c := range hit {
		c.fail(syscall.ECONNRESET)
	}
}

// Open returns how many connection ends on host its process has not
// closed: after the process stopped, a leak.
func (n *Net) Open(host string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := 0
	for c := range n.conns {
		if c.local.host == host {
			k++
		}
	}
	return k
}

func (n *Net) isCut(a, b string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cut[pair(a, b)] || n.down[a] || n.down[b]
}

// Listen opens a listener at host:port.
func (n *Net) Listen(host string, port int) (*Listener, error) {
	a := simAddr{host: host, port: port}
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, busy := n.listeners[a.String()]; busy {
		return nil, fmt.Errorf("sim: listen %s: %w", a, syscall.EADDRINUSE)
	}
	l := &Listener{net: n, addr: a, queue: make(chan *halfConn, 128), done: make(chan struct{})}
	n.listeners[a.String()] = l
	return l, nil
}

// Dialer returns the dialer a process on host uses.
func (n *Net) Dialer(host string) *Dialer { return &Dialer{net: n, host: host} }

// Dialer opens connections from one host; it satisfies client.Dialer.
type Dialer struct {
	net  *Net
	host string
}

// DialContext connects to address ("host:port"). A partitioned dial hangs
// until ctx ends, as a SYN into a black hole does; a dial to a port
// nobody listens on is refused at once.
func (d *Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	n := d.net
	host, port, err := splitAddr(address)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	if n.isCut(d.host, host) {
		<-ctx.Done()
		time.Sleep(tieBreak)
		return nil, &net.OpError{Op: "dial", Net: network, Err: ctx.Err()}
	}
	n.mu.Lock()
	l := n.listeners[address]
	key := d.host + ">" + address
	n.dials[key]++
	name := fmt.Sprintf("%s#%d", key, n.dials[key])
	n.mu.Unlock()
	// The local port comes from the moment, not from a count of dials:
	// goroutines dialing at one instant may count in either order, and
	// the port shows in the node's logs.
	if l == nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	}
	local := simAddr{host: d.host, port: 40000 + int(nameHash(fmt.Sprint(key, time.Now().UnixNano()))%20000)}
	remote := simAddr{host: host, port: port}
	a, b := newPipe(n, local, remote)
	a.name, b.name = name, name+"'"
	if n.Trace != nil {
		n.Trace(fmt.Sprintf("%v dial %s", time.Now().UnixNano(), name))
	}
	select {
	case l.queue <- b:
	default: // the backlog is full, or the listener closed
		return nil, &net.OpError{Op: "dial", Net: network, Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	}
	return a, nil
}

func splitAddr(address string) (string, int, error) {
	host, p, err := net.SplitHostPort(address)
	if err != nil {
		return "", 0, err
	}
	var port int
	if _, err := fmt.Sscanf(p, "%d", &port); err != nil {
		return "", 0, fmt.Errorf("sim: port %q: %w", p, err)
	}
	return host, port, nil
}

// tieBreak delays what a deadline ends (a hung dial, a read or write
// past its deadline) by a microsecond. The product's timers are often
// multiples of one another (a watchdog tick and a probe that waits two
// ticks); without it the deadline and the tick would fire at the same
// virtual instant, and which goroutine runs first would be up to the
// scheduler rather than the run's seed.
const tieBreak = time.Microsecond

// Listener is a listening socket on the simulated network.
type Listener struct {
	net   *Net
	addr  simAddr
	queue chan *halfConn
	once  sync.Once
	done  chan struct{}
}

// Accept waits for the next connection.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.queue:
		return c, nil
	case <-l.done:
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.addr, Err: net.ErrClosed}
	}
}

// Close stops listening; connections already accepted stay open, those
// still queued are refused.
func (l *Listener) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.net.mu.Lock()
		if l.net.listeners[l.addr.String()] == l {
			delete(l.net.listeners, l.addr.String())
		}
		l.net.mu.Unlock()
		for {
			select {
			case c := <-l.queue:
				c.fail(syscall.ECONNREFUSED)
			default:
				return
			}
		}
	})
	return nil
}

// Addr is the listening address.
func (l *Listener) Addr() net.Addr { return l.addr }

type simAddr struct {
	host string
	port int
}

func (a simAddr) Network() string { return "tcp" }
func (a simAddr) String() string  { return net.JoinHostPort(a.host, fmt.Sprint(a.port)) }

// maxBuffered bounds the bytes in flight plus unread in one direction, as
// a socket's buffers do: a writer past it blocks until its reader reads.
const maxBuffered = 8 << 20

// stream is one direction of a connection.
type stream struct {
	mu      sync.Mutex
	ready   []byte  // delivered, not yet read
	flight  int     // bytes written, not yet delivered
	pending []chunk // in flight, in write order
	last    time.Time
	eof     bool  // the writer closed
	gone    bool  // the reader closed: what is written is discarded
	err     error // a reset
	changed chan struct{}
}

func (s *stream) signal() {
	close(s.changed)
	s.changed = make(chan struct{})
}

type chunk struct {
	at   time.Time
	data []byte
}

// halfConn is one end of a connection: it reads in and writes out.
type halfConn struct {
	net           *Net
	local, remote simAddr
	in, out       *stream
	peer          *halfConn

	closeOnce sync.Once
	closed    chan struct{}
	rd, wd    deadline
	name      string
}

func newPipe(n *Net, local, remote simAddr) (*halfConn, *halfConn) {
	ab := &stream{changed: make(chan struct{})}
	ba := &stream{changed: make(chan struct{})}
	a := &halfConn{net: n, local: local, remote: remote, in: ba, out: ab, closed: make(chan struct{}), rd: newDeadline(), wd: newDeadline()}
	b := &halfConn{net: n, local: remote, remote: local, in: ab, out: ba, closed: make(chan struct{}), rd: newDeadline(), wd: newDeadline()}
	a.peer, b.peer = b, a
	n.mu.Lock()
	n.conns[a] = struct{}{}
	n.conns[b] = struct{}{}
	n.mu.Unlock()
	return a, b
}

func (c *halfConn) Read(p []byte) (int, error) {
	for {
		s := c.in
		s.mu.Lock()
		if len(s.ready) > 0 {
			k := copy(p, s.ready)
			s.ready = s.ready[k:]
			if len(s.ready) == 0 {
				s.ready = nil
			}
			s.signal() // room for the writer
			s.mu.Unlock()
			return k, nil
		}
		err, eof, wait := s.err, s.eof && s.flight == 0, s.changed
		s.mu.Unlock()
		select {
		case <-c.closed:
			return 0, net.ErrClosed
		default:
		}
		if err != nil {
			return 0, err
		}
		if eof {
			return 0, io.EOF
		}
		select {
		case <-wait:
		case <-c.closed:
			return 0, net.ErrClosed
		case <-c.rd.wait():
			return 0, os.ErrDeadlineExceeded
		}
	}
}

func (c *halfConn) Write(p []byte) (int, error) {
	s := c.out
	for {
		select {
		case <-c.closed:
			return 0, net.ErrClosed
		default:
		}
		if c.wd.expired() {
			return 0, os.ErrDeadlineExceeded
		}
		s.mu.Lock()
		if s.err != nil {
			err := s.err
			s.mu.Unlock()
			return 0, err
		}
		if s.eof {
			s.mu.Unlock()
			return 0, syscall.EPIPE
		}
		if s.gone {
			// The peer closed: TCP accepts the bytes and the peer's
			// kernel drops them (its reset comes later; the reader of
			// this connection has seen the peer's FIN by then).
			s.mu.Unlock()
			return len(p), nil
		}
		if s.flight+len(s.ready) < maxBuffered || len(p) == 0 {
			break
		}
		wait := s.changed
		s.mu.Unlock()
		select {
		case <-wait:
		case <-c.closed:
			return 0, net.ErrClosed
		case <-c.wd.wait():
			return 0, os.ErrDeadlineExceeded
		}
	}
	// s.mu is held.
	if len(p) == 0 {
		s.mu.Unlock()
		return 0, nil
	}
	lat := c.net.latencyOf(c.local.host, c.remote.host, p)
	lat += c.net.slowOf(c.local.host) + c.net.slowOf(c.remote.host)
	at := time.Now().Add(lat)
	if !at.After(s.last) {
		at = s.last.Add(time.Nanosecond)
	}
	s.last = at
	if c.net.Trace != nil {
		c.net.Trace(fmt.Sprintf("%v write %s %d at %v", time.Now().UnixNano(), c.name, len(p), at.UnixNano()))
	}
	s.flight += len(p)
	s.pending = append(s.pending, chunk{at: at, data: append([]byte(nil), p...)})
	s.mu.Unlock()
	time.AfterFunc(time.Until(at), func() { c.deliver(s) })
	return len(p), nil
}

// latencyOf draws the latency of bytes p sent from host a to host b now:
// a hash of the run's seed, the hosts, the moment and the bytes, not of the
// connection they go on. Two goroutines that write at the same instant
// (the frames of one batch) may take each other's pooled connection from
// one run to the next; their bytes still arrive when the run's seed says.
func (n *Net) latencyOf(a, b string, p []byte) time.Duration {
	h := fnv.New64a()
	var buf [8]byte
	binary.LittleEndian.PutUint64(buf[:], n.seed)
	_, _ = h.Write(buf[:])
	binary.LittleEndian.PutUint64(buf[:], uint64(time.Now().UnixNano()))
	_, _ = h.Write(buf[:])
	_, _ = io.WriteString(h, a)
	_, _ = io.WriteString(h, ">")
	_, _ = io.WriteString(h, b)
	_, _ = h.Write(p)
	lo, hi := n.latency[0], n.latency[1]
	return lo + time.Duration(h.Sum64()%uint64(hi-lo))
}

// partitionRetry is how often bytes held by a partition look for a
// healed link; they are delivered then, in order, as TCP's retransmits
// would deliver them.
const partitionRetry = 50 * time.Millisecond

// deliver makes the chunks of s that are due readable, in write order.
func (c *halfConn) deliver(s *stream) {
	if c.net.isCut(c.local.host, c.remote.host) {
		time.AfterFunc(partitionRetry, func() { c.deliver(s) })
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	k := 0
	for ; k < len(s.pending) && !s.pending[k].at.After(now); k++ {
		s.flight -= len(s.pending[k].data)
		if s.err == nil && !s.gone {
			s.ready = append(s.ready, s.pending[k].data...)
		}
	}
	if k > 0 {
		s.pending = s.pending[k:]
		s.signal()
	}
}

func (n *Net) slowOf(host string) time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.slow[host]
}

// Close closes this end: its reads and writes fail, and the peer reads
// EOF once what was written before has arrived.
func (c *halfConn) Close() error {
	c.closeOnce.Do(func() {
		close(c.closed)
		s := c.out
		s.mu.Lock()
		s.eof = true
		s.signal()
		s.mu.Unlock()
		// What arrives after the reader closed is discarded, and a
		// blocked peer writer is released.
		r := c.in
		r.mu.Lock()
		r.ready = nil
		r.gone = true
		r.signal()
		r.mu.Unlock()
		c.net.mu.Lock()
		delete(c.net.conns, c)
		c.net.mu.Unlock()
	})
	return nil
}

// fail breaks both directions with err, as a reset does.
func (c *halfConn) fail(err error) {
	for _, s := range []*stream{c.in, c.out} {
		s.mu.Lock()
		if s.err == nil {
			s.err = err
		}
		s.ready = nil
		s.signal()
		s.mu.Unlock()
	}
}

func (c *halfConn) LocalAddr() net.Addr  { return c.local }
func (c *halfConn) RemoteAddr() net.Addr { return c.remote }

func (c *halfConn) SetDeadline(t time.Time) error {
	c.rd.set(t)
	c.wd.set(t)
	return nil
}
func (c *halfConn) SetReadDeadline(t time.Time) error  { c.rd.set(t); return nil }
func (c *halfConn) SetWriteDeadline(t time.Time) error { c.wd.set(t); return nil }

// deadline is a settable deadline whose wait channel closes when it
// passes; timers are virtual inside a synctest bubble.
type deadline struct {
	mu    *sync.Mutex
	timer **time.Timer
	ch    *chan struct{}
}

func newDeadline() deadline {
	ch := make(chan struct{})
	var t *time.Timer
	return deadline{mu: &sync.Mutex{}, timer: &t, ch: &ch}
}

func (d deadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if *d.timer != nil && !(*d.timer).Stop() {
		<-*d.ch // the timer fired and closed ch
	}
	*d.timer = nil
	closed := false
	select {
	case <-*d.ch:
		closed = true
	default:
	}
	if t.IsZero() {
		if closed {
			*d.ch = make(chan struct{})
		}
		return
	}
	if dur := time.Until(t); dur > 0 {
		if closed {
			*d.ch = make(chan struct{})
		}
		ch := *d.ch
		*d.timer = time.AfterFunc(dur+tieBreak, func() { close(ch) })
		return
	}
	if !closed {
		close(*d.ch)
	}
}

func (d deadline) wait() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return *d.ch
}

func (d deadline) expired() bool {
	select {
	case <-d.wait():
		return true
	default:
		return false
	}
}
