package rdma

// These are not hardware tests: every test of this package runs the
// transport over the in-process Fake provider (no RDMA device, no kernel
// RDMA), which keeps the rules of rkeys, bounds, ordering and flushing
// that the transport relies on. Nothing here shows the libibverbs
// provider works on a real NIC.

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/engine/ramtier"
	"github.com/dfkv/dfkv/wire"
)

// pipeListener hands out in-process net.Pipe connections. The tests use
// it rather than loopback TCP so that what one side writes before a frame
// happens before what the other side does after reading it, for the race
// detector too (it does not see ordering through sockets), as the NIC and
// the kernel order it on hardware.
type pipeListener struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{ch: make(chan net.Conn), done: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

func (l *pipeListener) dial(ctx context.Context, _ string) (net.Conn, error) {
	a, b := net.Pipe()
	select {
	case l.ch <- b:
		return a, nil
	case <-l.done:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

// memEngine is an in-memory engine.StoreEngine: the RAM tier's backing
// and the node's engine in these tests.
type memEngine struct {
	mu   sync.Mutex
	vals map[wire.BlockKey][]byte
}

func newMemEngine() *memEngine { return &memEngine{vals: map[wire.BlockKey][]byte{}} }

func (m *memEngine) Put(k wire.BlockKey, v []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.vals[k] = append([]byte(nil), v...)
	return nil
}

func (m *memEngine) PutBatch(keys []wire.BlockKey, vals [][]byte, errs []error) {
	for i := range keys {
		errs[i] = m.Put(keys[i], vals[i])
	}
}

func (m *memEngine) Get(k wire.BlockKey, off, length uint64, alloc engine.Allocator) ([]byte, uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.vals[k]
	if !ok {
		return nil, 0, wire.StatusNotFound
	}
	n, ok := wire.RangeLen(uint64(len(v)), off, length)
	if !ok {
		return nil, uint64(len(v)), wire.StatusInvalid
	}
	b := alloc.Alloc(int(n))
	copy(b, v[off:off+n])
	return b, uint64(len(v)), nil
}

func (m *memEngine) Exist(k wire.BlockKey) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if v, ok := m.vals[k]; ok {
		return uint64(len(v)), nil
	}
	return 0, wire.StatusNotFound
}

func (m *memEngine) Remove(k wire.BlockKey) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.vals[k]; !ok {
		return wire.StatusNotFound
	}
	delete(m.vals, k)
	return nil
}

func (m *memEngine) Stats() engine.Stats { return engine.Stats{} }
func (m *memEngine) Close() error        { return nil }

// rig is a node over a RAM tier (arena slots up to extentBytes; larger
// values bypass RAM and are served inline) on a Fake, and a way to dial
// it.
type rig struct {
	t     *testing.T
	fake  *Fake
	tier  *ramtier.Tier
	ln    *pipeListener
	node  *Node
	ended chan struct{} // a token per connection teardown
}

const extentBytes = 64 << 10

func newRig(t *testing.T, mod func(*NodeOptions)) *rig {
	t.Helper()
	tier, err := ramtier.Open(ramtier.Options{Backing: newMemEngine(), Bytes: 2 << 20, ExtentBytes: extentBytes,
		LargeReserveBytes: ramtier.NoLargeReserve, MaxValueBytes: 1 << 20, Shards: 1, NUMA: ramtier.NUMAOff, WarmWorkers: 1})
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, fake: NewFake(), tier: tier, ln: newPipeListener(), ended: make(chan struct{}, 64)}
	opts := NodeOptions{Provider: r.fake, Arena: tier, Engine: tier, LeaseMax: 64, StagingBytes: 256 << 10, MaxBlockBytes: 1 << 20}
	if mod != nil {
		mod(&opts)
	}
	if r.node, err = NewNode(r.ln, opts); err != nil {
		tier.Close()
		t.Fatal(err)
	}
	r.node.connEnded = func() { r.ended <- struct{}{} }
	served := make(chan error, 1)
	go func() { served <- r.node.Serve() }()
	t.Cleanup(func() {
		r.fake.SetHook(nil)
		if err := r.node.Close(); err != nil {
			t.Errorf("node close: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
		if n := r.fake.Registered(); n != 0 {
			t.Errorf("%d memory regions still registered after every connection and the node closed", n)
		}
		if err := tier.Close(); err != nil {
			t.Errorf("tier close: %v", err)
		}
	})
	return r
}

func (r *rig) dial(mod func(*ClientOptions)) *Conn {
	r.t.Helper()
	c, err := r.dialErr(mod)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { c.Close() })
	return c
}

func (r *rig) dialErr(mod func(*ClientOptions)) (*Conn, error) {
	opts := ClientOptions{Provider: r.fake, Dial: r.ln.dial, BufferBytes: 256 << 10, OpTimeout: 10 * time.Second}
	if mod != nil {
		mod(&opts)
	}
	return Dial("pipe", opts)
}

// waitEnded waits for one connection's teardown on the node.
func (r *rig) waitEnded() {
	r.t.Helper()
	select {
	case <-r.ended:
	case <-time.After(10 * time.Second):
		r.t.Fatal("the node did not end the connection")
	}
}

func key(n uint64) wire.BlockKey {
	k := wire.BlockKey{Tenant: 1}
	k.ID[0], k.ID[15] = byte(n), byte(n>>8)
	return k
}

// value is n bytes that differ per tag and position.
func value(tag byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = tag + byte(i*7) + byte(i>>8)
	}
	return b
}
