// Package client is the Go client of dfkv: it maps (namespace, object key)
// to a BlockKey, routes the block to a node by Ketama, and speaks the TCP
// frame protocol of package wire over pooled connections.
//
// A Client is safe for concurrent use. Every call takes a context; a call
// without a deadline gets Options.Timeout. Failures are errors wrapping a
// wire.Status (errors.Is(err, wire.StatusNotFound) for a miss), so callers
// and the C ABI see the same codes as the server.
//
// # Node failures
//
// Each node has a circuit breaker. A connection failure or timeout opens
// it for a back-off window (100 ms doubling to 5 s) during which the
// node's blocks are answered at once as misses (GET, EXIST, and so the
// prefix length) and its writes as UNAVAILABLE. When the window ends one
// call probes the node while the others still get the fast answer, so a
// silent node costs one timeout per window, not one per caller; the
// probe's success closes the breaker, its failure doubles the window.
// Calls that fail while it is open (those in flight when a node paused)
// count as one failure.
//
// A node that keeps its connections open but stops answering (SIGSTOP, a
// black-holed route) is noticed without waiting for a call's deadline:
// once nothing has been heard from it for a quarter of Options.Timeout
// (at least 250 ms) while calls are in flight, further calls fail at
// once, and a watchdog PINGs it on a connection of its own; if that goes
// unanswered, the calls in flight are cut, which opens the breaker. The
// watchdog never cuts a call that is still moving data (a megabyte either
// way within the quarter), nor the calls of a node that answers the PING.
// Request bytes a node takes do not count as hearing from it: socket
// buffers take megabytes from a stopped process.
//
// # Members
//
// With an MDS the client polls for the member list by epoch (every
// Options.MDSPoll, jittered by half either way, and backing off to 5 s
// while no MDS answers) and rebuilds its ring when the epoch moves. A
// list with no members at all (every heartbeat lapsing at once, as after
// an MDS restart) is not applied: the client keeps routing over the last
// members it knew and says so once.
package client

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/dfkv/dfkv/rdma"
	"github.com/dfkv/dfkv/wire"
	"github.com/dfkv/dfkv/wire/deadline"
)

// Dialer opens connections to nodes. *net.Dialer satisfies it; tests and an
// in-process node pass their own.
type Dialer interface {
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// Options configure a Client.
type Options struct {
	// Namespace is the immutable binary namespace every key of this client
	// lives in (a wire.NamespaceDescriptor encoding, or any other bytes).
	Namespace []byte
	// Members are the nodes' host:port addresses (static membership).
	Members []string
	// MDS are membership-directory addresses; when set, Members is
	// ignored and the client discovers and follows the group's members.
	MDS []string
	// Group is the cluster group to ask the MDS about ("default").
	Group string
	// MDSPoll is how often the client asks the MDS whether membership
	// changed: each wait is drawn from half to one and a half times it,
	// and grows while the MDS does not answer (pollBackoff).
	MDSPoll time.Duration
	// Jitter draws the spread of the MDS polls uniformly from [0, d); nil:
	// math/rand. A deterministic simulation passes a seeded source.
	Jitter func(d time.Duration) time.Duration
	// Timeout applies to a call whose context has no deadline. A quarter
	// of it (at least 250 ms) is how long a node may stay silent with
	// calls in flight before the client asks it whether it is alive
	// (peer.probe, Client.watch).
	Timeout time.Duration
	// DialTimeout bounds connecting to one node.
	DialTimeout time.Duration
	// PoolSize is how many idle connections are kept per node.
	PoolSize int
	// BatchConcurrency is how many nodes a batch call talks to at once.
	BatchConcurrency int
	// MaxBatchItems splits batches into frames of at most this many items;
	// it must not exceed the nodes' max_batch_items.
	MaxBatchItems int
	// MaxBlockBytes is the largest value the client will send or accept.
	MaxBlockBytes uint64
	// RDMA, when set, reads and writes values over RDMA (package rdma)
	// with every node, falling back to TCP for a node whose RDMA fails
	// (for a while) and for the calls RDMA does not serve (buffers the
	// node sizes, vectored parts, lookups, removes). Nil: TCP (and
	// shared memory) only.
	RDMA *rdma.ClientOptions
	// Local, set by an embedded store (package roles/embed), reads a
	// value its in-process node holds in RAM straight into the caller's
	// buffer (server.LocalRead); ok false sends the read over the
	// connection as usual. GetRange, Get and GetBatch into caller buffers
	// use it.
	Local func(key wire.BlockKey, offset, length uint64, dst []byte) (n int, stored uint64, ok bool, err error)
	// AfterClose, when set, runs once at the end of Close and its error is
	// Close's: an embedded store stops its node there, so whoever holds
	// only the client still closes the store.
	AfterClose func() error
	// TLS, when set, speaks TLS with every node and MDS (every dial goes
	// through a handshake with this configuration; its ServerName, when
	// empty, is each address's host). Nil: plain TCP.
	TLS *tls.Config
	// Token is presented once on every new connection (AUTH) to nodes
	// that require credentials; a node without them ignores it. Empty:
	// no token. The client never logs it.
	Token string
	// SharedMemory is ShmAuto (the default: shared memory for nodes on
	// this host that offer it, TCP otherwise), ShmOff or ShmOn.
	SharedMemory string
	Dialer       Dialer
	Logger       *slog.Logger
}

func (o *Options) setDefaults() {
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 2 * time.Second
	}
	if o.PoolSize <= 0 {
		o.PoolSize = 16
	}
	if o.BatchConcurrency <= 0 {
		o.BatchConcurrency = 8
	}
	if o.MaxBatchItems <= 0 {
		o.MaxBatchItems = 1024
	}
	if o.MaxBlockBytes == 0 {
		o.MaxBlockBytes = 64 << 20
	}
	if o.Dialer == nil {
		o.Dialer = &net.Dialer{KeepAlive: 30 * time.Second}
	}
	if o.TLS != nil {
		if _, wrapped := o.Dialer.(*tlsDialer); !wrapped {
			o.Dialer = &tlsDialer{inner: o.Dialer, cfg: o.TLS}
		}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.SharedMemory == "" {
		o.SharedMemory = ShmAuto
	}
	if o.Group == "" {
		o.Group = "default"
	}
	if o.MDSPoll <= 0 {
		o.MDSPoll = 500 * time.Millisecond
	}
}

// Client talks to one dfkv cluster in one namespace.
type Client struct {
	opts   Options
	mapper *wire.KeyMapper
	table  atomic.Pointer[routeTable]

	mds  *MDSClient // nil with static members
	stop chan struct{}
	done chan struct{}

	peerMu sync.Mutex
	peers  map[string]*peer // by address, kept across ring rebuilds

	watchStop, watchDone chan struct{}  // the stall watchdog (watch)
	probes               sync.WaitGroup // its liveness probes, waited for by Close

	closeOnce sync.Once
	closeErr  error // AfterClose's
}

// routeTable is one immutable view of the cluster: a ring and the peer of
// each ring member. A membership change swaps in a new table; calls in
// flight keep the table they started with.
type routeTable struct {
	epoch   uint64
	ring    *wire.Ring // nil when no member is known
	peers   []*peer
	members []wire.MemberInfo
}

// Open validates opts and returns a Client. With static members it does
// not connect: nodes are dialed on first use. With MDS addresses it asks
// the MDS for the members once (failing if no MDS answers) and then
// follows membership changes in the background every MDSPoll.
func Open(opts Options) (*Client, error) {
	opts.setDefaults()
	switch opts.SharedMemory {
	case ShmAuto, ShmOff, ShmOn:
	default:
		return nil, fmt.Errorf("client: shared memory mode %q: want %q, %q or %q: %w", opts.SharedMemory, ShmAuto, ShmOff, ShmOn, wire.StatusInvalid)
	}
	mapper, err := wire.NewKeyMapper(opts.Namespace)
	if err != nil {
		return nil, fmt.Errorf("client: namespace: %w", err)
	}
	c := &Client{opts: opts, mapper: mapper, peers: map[string]*peer{}}
	if len(opts.MDS) > 0 {
		if c.mds, err = NewMDSClient(opts.MDS, opts.Group, opts.Dialer, opts.DialTimeout+opts.Timeout); err != nil {
			return nil, fmt.Errorf("client: %w", err)
		}
		c.mds.SetToken(opts.Token) // an MDS may require one for MEMBERS
		ctx, cancel := context.WithTimeout(context.Background(), opts.Timeout)
		defer cancel()
		epoch, members, _, err := c.mds.Members(ctx, 0)
		if err != nil {
			return nil, fmt.Errorf("client: discover members of group %s from MDS %v: %w", opts.Group, opts.MDS, err)
		}
		if err := c.install(epoch, members); err != nil {
			return nil, fmt.Errorf("client: %w", err)
		}
		c.stop, c.done = make(chan struct{}), make(chan struct{})
		go c.follow()
		c.startWatch()
		return c, nil
	}
	if len(opts.Members) == 0 {
		return nil, fmt.Errorf("client: no members: give node addresses host:port or MDS addresses: %w", wire.StatusInvalid)
	}
	members := make([]wire.MemberInfo, len(opts.Members))
	for i, addr := range opts.Members {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("client: member %q is not host:port: %v: %w", addr, err, wire.StatusInvalid)
		}
		members[i] = wire.MemberInfo{ID: addr, Addr: addr, Weight: 1}
	}
	if err := c.install(0, members); err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	c.startWatch()
	return c, nil
}

// install builds and publishes a routing table for members.
func (c *Client) install(epoch uint64, members []wire.MemberInfo) error {
	t := &routeTable{epoch: epoch, members: members}
	if len(members) > 0 {
		rm := make([]wire.Member, len(members))
		for i, m := range members {
			rm[i] = wire.Member{ID: m.ID, Addr: m.Addr, Weight: m.Weight}
		}
		ring, err := wire.NewRing(rm, 0)
		if err != nil {
			return err
		}
		t.ring = ring
	}
	keep := map[string]bool{}
	c.peerMu.Lock()
	t.peers = make([]*peer, len(members))
	for i, m := range members {
		p := c.peers[m.Addr]
		if p == nil {
			p = newPeer(m.Addr, &c.opts)
			c.peers[m.Addr] = p
		}
		t.peers[i] = p
		keep[m.Addr] = true
	}
	var gone []*peer
	for addr, p := range c.peers {
		if !keep[addr] {
			gone = append(gone, p)
			delete(c.peers, addr)
		}
	}
	c.peerMu.Unlock()
	c.table.Store(t)
	for _, p := range gone {
		p.close()
	}
	return nil
}

// mdsRetryMax caps how far apart a client's polls of an MDS that does
// not answer grow (or MDSPoll, if that is longer).
const mdsRetryMax = 5 * time.Second

// pollBackoff paces the MDS polls of follow: MDSPoll apart, give or take
// half of it, while the MDS answers; doubling after each failed poll up
// to mdsRetryMax (Reset after an answer). The jitter keeps a fleet of
// clients started together, or all cut off by one MDS restart, from
// polling in step.
func pollBackoff(poll time.Duration) *backoff.ExponentialBackOff {
	return &backoff.ExponentialBackOff{
		InitialInterval:     poll,
		RandomizationFactor: 0.5,
		Multiplier:          2,
		MaxInterval:         max(poll, mdsRetryMax),
	}
}

// follow polls the MDS for membership changes until Close. A changed
// epoch with the same member set swaps nothing.
func (c *Client) follow() {
	defer close(c.done)
	pace := pollBackoff(c.opts.MDSPoll)
	next := pace.NextBackOff
	if draw := c.opts.Jitter; draw != nil {
		// The same spread, half the wait either way, from the caller's
		// source instead of the library's.
		pace.RandomizationFactor = 0
		next = func() time.Duration {
			d := pace.NextBackOff()
			return d/2 + draw(d)
		}
	}
	t := time.NewTimer(next())
	defer t.Stop()
	var st followState
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		if c.poll(&st) {
			pace.Reset()
		}
		t.Reset(next())
	}
}

// followState is what follow carries from one poll to the next, so that
// each condition is logged once, when it starts.
type followState struct {
	failing bool // the MDS does not answer
	holding bool // keeping the last members while the MDS lists none
}

// poll asks the MDS once and installs what changed. It reports whether
// the MDS answered.
func (c *Client) poll(st *followState) bool {
	cur := c.table.Load()
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.Timeout)
	// Close ends a poll of an MDS that does not answer at once, rather
	// than wait out its timeout.
	go func() {
		select {
		case <-c.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	epoch, members, changed, err := c.mds.Members(ctx, cur.epoch)
	cancel()
	select {
	case <-c.stop:
		return false // closing: the poll was cut short, not the MDS gone
	default:
	}
	if err != nil {
		if !st.failing {
			c.opts.Logger.Warn("client: MDS unreachable; routing over the last known members", "mds", c.opts.MDS, "error", err.Error())
			st.failing = true
		}
		return false
	}
	if st.failing {
		c.opts.Logger.Info("client: MDS reachable again", "mds", c.opts.MDS)
		st.failing = false
	}
	if !changed {
		return true
	}
	if sameMembers(cur.members, members) {
		// Often the end of a hold: the nodes registered again.
		st.holding = false
		nt := *cur
		nt.epoch = epoch
		c.table.Store(&nt)
		return true
	}
	if len(members) == 0 && len(cur.members) > 0 {
		// Every node gone at once is far more often every heartbeat
		// lapsing together (an MDS restarted with a shorter TTL, an
		// etcd pause expiring the leases) than a fleet taken down; they
		// register again within moments. Routing over the last list
		// costs, if they are really gone, what an empty list costs:
		// misses. So keep it, and keep the epoch, so the next poll asks
		// again.
		if !st.holding {
			c.opts.Logger.Warn("client: the MDS lists no members; routing over the last known members until it lists some",
				"epoch", epoch, "last_members", len(cur.members))
			st.holding = true
		}
		return true
	}
	st.holding = false
	if err := c.install(epoch, members); err != nil {
		c.opts.Logger.Error("client: cannot route over the new member list", "epoch", epoch, "error", err.Error())
		return true
	}
	c.opts.Logger.Info("client: membership changed", "epoch", epoch, "members", len(members))
	return true
}

func sameMembers(a, b []wire.MemberInfo) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].ID != b[i].ID || a[i].Addr != b[i].Addr || a[i].Weight != b[i].Weight {
			return false
		}
	}
	return true
}

// Close stops following the MDS and closes idle connections. Calls in
// flight finish on their own.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		defer func() {
			if c.opts.AfterClose != nil {
				c.closeErr = c.opts.AfterClose()
			}
		}()
		if c.stop != nil {
			close(c.stop)
			<-c.done
		}
		close(c.watchStop)
		<-c.watchDone
		c.probes.Wait()
		c.peerMu.Lock()
		peers := make([]*peer, 0, len(c.peers))
		for _, p := range c.peers {
			peers = append(peers, p)
		}
		c.peerMu.Unlock()
		for _, p := range peers { // closed outside the lock: a TLS or RDMA close may wait on the network
			p.close()
		}
	})
	return c.closeErr
}

// Epoch is the membership epoch the client routes by (0 for static
// members).
func (c *Client) Epoch() uint64 { return c.table.Load().epoch }

// BlockKey returns the native identity of key in the client's namespace.
func (c *Client) BlockKey(key []byte) (wire.BlockKey, error) { return c.mapper.BlockKey(key) }

// errNoMembers answers every call while no node is known.
var errNoMembers = fmt.Errorf("no cache node is registered in the group: %w", wire.StatusUnavailable)

// route returns the node owning k, or nil when no node is known.
func (c *Client) route(k wire.BlockKey) *peer {
	t := c.table.Load()
	if t.ring == nil {
		return nil
	}
	return t.peers[t.ring.Get(k.RouteHash())]
}

// Owner returns the address of the node that owns key.
func (c *Client) Owner(key []byte) (string, error) {
	k, err := c.mapper.BlockKey(key)
	if err != nil {
		return "", err
	}
	p := c.route(k)
	if p == nil {
		return "", errNoMembers
	}
	return p.addr, nil
}

// MemberList returns the members the client routes over.
func (c *Client) MemberList() []wire.MemberInfo {
	return append([]wire.MemberInfo(nil), c.table.Load().members...)
}

// Members returns the node addresses the client routes over.
func (c *Client) Members() []string {
	t := c.table.Load()
	out := make([]string, len(t.members))
	for i, m := range t.members {
		out[i] = m.Addr
	}
	return out
}

func (c *Client) deadline(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return time.Now().Add(c.opts.Timeout)
}

// deadlineSlack is how much earlier than its own deadline an exchange may
// keep the one its connection already has (package deadline): some when
// the deadline comes from Timeout, none when it comes from the caller's
// context, which is honoured exactly.
func (c *Client) deadlineSlack(ctx context.Context) time.Duration {
	if _, ok := ctx.Deadline(); ok {
		return 0
	}
	return deadline.Slack(c.opts.Timeout)
}

// ErrBufferTooSmall is returned by Get when the stored value is longer
// than the destination; the stored length is returned with it so the
// caller can retry with a large enough buffer (or use GetAuto).
var ErrBufferTooSmall = fmt.Errorf("destination buffer smaller than the stored value: %w", wire.StatusTooLarge)

func checkValue(v []byte, max uint64) error {
	if len(v) == 0 {
		return fmt.Errorf("zero-byte value: dfkv stores only non-empty values: %w", wire.StatusInvalid)
	}
	if uint64(len(v)) > max {
		return fmt.Errorf("value of %d bytes exceeds max_block_bytes %d: %w", len(v), max, wire.StatusTooLarge)
	}
	return nil
}
