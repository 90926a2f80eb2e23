package rdma

// Not hardware tests: the transport runs over the Fake (and, for READ
// ordering, a wrapper that reorders unfenced READs as a NIC may).

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/wire"
)

// getSpy is the node's engine, reporting each Get to onGet.
type getSpy struct {
	engine.StoreEngine
	onGet func()
}

func (g *getSpy) Get(k wire.BlockKey, off, length uint64, a engine.Allocator) ([]byte, uint64, error) {
	g.onGet()
	return g.StoreEngine.Get(k, off, length, a)
}

// TestInlineRepliesAreNotBufferedWhole: a LEASE_GET answer's inline
// values stream: one frame of many items naming a large value that is not
// leased (no arena, a value past an extent, or a full lease table) must
// not make the node hold all of them at once (4096 x 64 MiB by default).
// Here: 32 items of a 512 KiB value; by the time the node fetches the
// last one, the client has received some of the answer.
func TestInlineRepliesAreNotBufferedWhole(t *testing.T) {
	const items, size = 32, 512 << 10
	var received atomic.Int64
	var gets atomic.Int32
	var atLastGet atomic.Int64
	atLastGet.Store(-1)
	r := newRig(t, func(o *NodeOptions) {
		o.Arena = nil // every value inline
		o.Engine = &getSpy{StoreEngine: o.Engine, onGet: func() {
			if gets.Add(1) == items {
				atLastGet.Store(received.Load())
			}
		}}
	})
	if err := r.tier.Put(key(1), value(3, size)); err != nil {
		t.Fatal(err)
	}
	c := r.dial(nil)
	var body []byte
	for range items {
		body = wire.AppendGetItem(body, key(1), 0, 0)
	}
	c.wbuf = wire.AppendRequest(c.wbuf[:0], &wire.RequestHeader{Op: wire.OpLeaseGet, Length: items, BodyLen: uint64(len(body))})
	c.wbuf = append(c.wbuf, body...)
	if err := c.send(); err != nil {
		t.Fatal(err)
	}
	want := int64(wire.ResponsePrefixLen + items*(wire.LeaseRecordLen+size))
	buf := make([]byte, 64<<10)
	for received.Load() < want {
		n, err := c.br.Read(buf)
		received.Add(int64(n))
		if err != nil {
			t.Fatalf("reading the answer: %v after %d of %d bytes", err, received.Load(), want)
		}
	}
	if got := atLastGet.Load(); got <= 0 {
		t.Fatalf("the node fetched all %d inline values (%d bytes) before it sent any byte of the answer (client had %d bytes): the whole answer is buffered in memory",
			items, items*size, got)
	}
}

// reorderProvider wraps the Fake for the client: of two READs posted one
// after the other, the second executes first unless it is fenced. This
// is what an RC QP is allowed to do: several READs are outstanding at
// once (max_rd_atomic, up to 16 here, dfkv_qp_rts), and the responder's
// DMA reads of one READ are not ordered against those of the next (PCIe
// non-posted reads may pass each other); only their completions come back
// in order. IBV_SEND_FENCE on a work request holds it until every earlier
// READ of the send queue has completed. The Fake runs READs one after the
// other, to completion, so it never shows this.
type reorderProvider struct{ f *Fake }

func (p reorderProvider) Open(name string) (Device, error) {
	d, err := p.f.Open(name)
	if err != nil {
		return nil, err
	}
	return reorderDevice{d}, nil
}

type reorderDevice struct{ Device }

func (d reorderDevice) AllocPD() (PD, error) {
	pd, err := d.Device.AllocPD()
	if err != nil {
		return nil, err
	}
	return reorderPD{pd}, nil
}

type reorderPD struct{ PD }

func (p reorderPD) CreateQP(depth int) (QP, error) {
	q, err := p.PD.CreateQP(depth)
	if err != nil {
		return nil, err
	}
	return &reorderQP{QP: q}, nil
}

type reorderQP struct {
	QP
	mu   sync.Mutex
	held *WorkRequest
}

// fenced reports whether wr asks to wait for the READs before it.
func fenced(wr WorkRequest) bool { return wr.Fence }

func (q *reorderQP) Post(wr WorkRequest) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.held == nil {
		if wr.Op == OpRead {
			q.held = &wr
			return nil
		}
		return q.QP.Post(wr)
	}
	held := *q.held
	q.held = nil
	if wr.Op == OpRead && !fenced(wr) {
		if err := q.QP.Post(wr); err != nil {
			return err
		}
		return q.QP.Post(held)
	}
	if err := q.QP.Post(held); err != nil {
		return err
	}
	return q.QP.Post(wr)
}

func (q *reorderQP) Poll(dst []Completion) (int, error) {
	q.mu.Lock()
	if q.held != nil {
		held := *q.held
		q.held = nil
		if err := q.QP.Post(held); err != nil {
			q.mu.Unlock()
			return 0, err
		}
	}
	q.mu.Unlock()
	return q.QP.Poll(dst)
}

// TestLeaseWordReadAfterTheBytes: the client's seqlock check needs the
// lease word to be read after the value's bytes: on a QP that lets an
// unfenced READ run before the one posted ahead of it (reorderProvider),
// a lease that ends between the two must not make the client return
// bytes read after it ended as valid.
func TestLeaseWordReadAfterTheBytes(t *testing.T) {
	r := newRig(t, nil)
	if err := r.tier.Put(key(1), value(9, 4096)); err != nil {
		t.Fatal(err)
	}
	c := r.dial(func(o *ClientOptions) { o.Provider = reorderProvider{r.fake} })
	arenaKey := c.remote.ArenaKey
	paused, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	r.fake.SetHook(func(op FakeOp) FakeFault {
		if op.RKey == arenaKey {
			once.Do(func() { close(paused); <-resume })
		}
		return FaultNone
	})
	dst := make([]byte, 4096)
	done := make(chan GetResult, 1)
	go func() {
		res, err := c.Get(key(1), 0, 0, dst)
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	<-paused
	if n := r.node.leases.Expire(time.Now().Add(time.Hour)); n != 1 {
		t.Fatalf("expired %d leases, want 1", n)
	}
	close(resume)
	res := <-done
	r.fake.SetHook(nil)
	if !errors.Is(res.Err, wire.StatusNotFound) || res.N != 0 {
		t.Fatalf("the value's bytes were READ after its lease ended, and returned as valid: %+v", res)
	}
}

// TestNodeWriteHasADeadline: a client that sends a LEASE_GET and never
// reads the answer loses its connection after BootstrapTimeout (200 ms
// here), rather than holding its QP, its registered staging region and
// the node's goroutine for ever.
func TestNodeWriteHasADeadline(t *testing.T) {
	r := newRig(t, func(o *NodeOptions) { o.Arena = nil; o.BootstrapTimeout = 200 * time.Millisecond })
	if err := r.tier.Put(key(1), value(3, 64<<10)); err != nil {
		t.Fatal(err)
	}
	c := r.dial(nil)
	var body []byte
	body = wire.AppendGetItem(body, key(1), 0, 0)
	c.wbuf = wire.AppendRequest(c.wbuf[:0], &wire.RequestHeader{Op: wire.OpLeaseGet, Length: 1, BodyLen: uint64(len(body))})
	c.wbuf = append(c.wbuf, body...)
	if err := c.send(); err != nil {
		t.Fatal(err)
	}
	// The client reads nothing (net.Pipe: the node's Write waits for it).
	select {
	case <-r.ended:
	case <-time.After(10 * time.Second):
		st := r.node.Stats()
		t.Fatalf("a client that does not read its answer holds its connection (and its QP and staging region) open: %d connections live", st.Conns)
	}
}
