package rdma

// Not hardware tests: the transport runs over the in-process Fake (see
// helpers_test.go).

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dfkv/dfkv/engine/iobuf"
	"github.com/dfkv/dfkv/wire"
)

// TestGetLeasedAndInline: resident values are READ out of the arena
// under leases (whole and a range), a miss is NOT_FOUND, a value not in
// the arena (larger than an extent) comes inline, and the leases are
// released with the next request.
func TestGetLeasedAndInline(t *testing.T) {
	r := newRig(t, nil)
	small, mid, big := value(1, 3000), value(2, 40<<10), value(3, 100<<10) // big > one extent: not in the arena
	for i, v := range [][]byte{small, mid, big} {
		if err := r.tier.Put(key(uint64(i)), v); err != nil {
			t.Fatal(err)
		}
	}
	c := r.dial(nil)
	items := []GetItem{{Key: key(0)}, {Key: key(1)}, {Key: key(2)}, {Key: key(9)}, {Key: key(1), Offset: 1000, Length: 500}, {Key: key(0), Offset: 3000}}
	dst := make([][]byte, len(items))
	for i := range dst {
		dst[i] = make([]byte, 128<<10)
	}
	res := make([]GetResult, len(items))
	if err := c.GetBatch(items, dst, res); err != nil {
		t.Fatal(err)
	}
	want := [][]byte{small, mid, big, nil, mid[1000:1500], {}}
	stored := []uint64{3000, 40 << 10, 100 << 10, 0, 40 << 10, 3000}
	for i := range items {
		if i == 3 {
			if !errors.Is(res[i].Err, wire.StatusNotFound) {
				t.Errorf("miss: %+v", res[i])
			}
			continue
		}
		if res[i].Err != nil || res[i].Stored != stored[i] || !bytes.Equal(dst[i][:res[i].N], want[i]) {
			t.Errorf("item %d: %+v, %d bytes equal: %v", i, res[i], res[i].N, bytes.Equal(dst[i][:res[i].N], want[i]))
		}
	}
	st := r.node.Stats().Leases
	if st.Granted != 3 || st.Live != 3 {
		t.Fatalf("leases after one batch: %+v, want 3 granted (the big value came inline, the empty range leased nothing)", st)
	}
	if err := c.Ping(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(key(0), 0, 10, dst[0]); err != nil { // carries the releases
		t.Fatal(err)
	}
	if st := r.node.Stats().Leases; st.Released != 3 || st.Live != 1 {
		t.Fatalf("leases after the next request: %+v, want the 3 released and 1 live", st)
	}
}

// TestBatchChunks: a batch larger than one frame and than the buffer is
// split into frames and READ groups, and every item arrives intact.
func TestBatchChunks(t *testing.T) {
	r := newRig(t, nil)
	const n = 40
	items := make([]GetItem, n)
	dst := make([][]byte, n)
	for i := range n {
		if err := r.tier.Put(key(uint64(i)), value(byte(i), 5000+i)); err != nil {
			t.Fatal(err)
		}
		items[i] = GetItem{Key: key(uint64(i))}
		dst[i] = make([]byte, 8000)
	}
	c := r.dial(func(o *ClientOptions) { o.MaxBatchItems = 7; o.BufferBytes = 16 << 10 })
	res := make([]GetResult, n)
	for round := range 3 { // later rounds release the earlier leases
		if err := c.GetBatch(items, dst, res); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if res[i].Err != nil || !bytes.Equal(dst[i][:res[i].N], value(byte(i), 5000+i)) {
				t.Fatalf("round %d item %d: %+v", round, i, res[i])
			}
		}
	}
	if st := r.node.Stats().Leases; st.Live > n || st.Full != 0 {
		t.Fatalf("leases: %+v", st)
	}
}

// TestPutThroughStaging: values are WRITTEN into the connection's staging
// region and stored by LEASE_PUT; one larger than the staging region is
// TOO_LARGE and the others are stored.
func TestPutThroughStaging(t *testing.T) {
	r := newRig(t, nil)
	c := r.dial(nil)
	keys := []wire.BlockKey{key(1), key(2), key(3), key(4)}
	vals := [][]byte{value(1, 100), value(2, 200<<10), value(3, 300<<10), value(4, 120<<10)}
	errs := make([]error, len(keys))
	if err := c.PutBatch(keys, vals, errs); err != nil {
		t.Fatal(err)
	}
	for i, k := range keys {
		if i == 2 {
			if !errors.Is(errs[i], wire.StatusTooLarge) {
				t.Errorf("300 KiB value through a 256 KiB staging region: %v", errs[i])
			}
			continue
		}
		if errs[i] != nil {
			t.Fatalf("put %d: %v", i, errs[i])
		}
		got, _, err := r.tier.Get(k, 0, 0, iobuf.Heap{})
		if err != nil || !bytes.Equal(got, vals[i]) {
			t.Fatalf("stored value %d: %v, equal %v", i, err, bytes.Equal(got, vals[i]))
		}
	}
	dst := make([]byte, 200<<10)
	if res, err := c.Get(key(2), 0, 0, dst); err != nil || res.Err != nil || !bytes.Equal(dst[:res.N], vals[1]) {
		t.Fatalf("get after put: %+v %v", res, err)
	}
}

// TestLeaseLapsedIsMiss: a client paused between the READ of a value's
// bytes and the READ of its lease word, while the lease expires, reports
// a miss and leaves the destination untouched.
func TestLeaseLapsedIsMiss(t *testing.T) {
	r := newRig(t, nil)
	if err := r.tier.Put(key(1), value(9, 4096)); err != nil {
		t.Fatal(err)
	}
	c := r.dial(nil)
	wordsKey := c.remote.WordsKey
	paused, resume := make(chan struct{}), make(chan struct{})
	r.fake.SetHook(func(op FakeOp) FakeFault {
		if op.RKey == wordsKey {
			close(paused)
			<-resume
		}
		return FaultNone
	})
	dst := make([]byte, 4096)
	done := make(chan GetResult)
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
	if !errors.Is(res.Err, wire.StatusNotFound) || res.N != 0 || !bytes.Equal(dst, make([]byte, 4096)) {
		t.Fatalf("lapsed lease: %+v, want a miss with nothing copied", res)
	}
	// The next read is leased afresh and whole.
	if res, err := c.Get(key(1), 0, 0, dst); err != nil || res.Err != nil || !bytes.Equal(dst[:res.N], value(9, 4096)) {
		t.Fatalf("read after the lapse: %+v %v", res, err)
	}
}

// rawRelease sends RELEASE of ids on c and returns how many the node
// ended.
func rawRelease(t *testing.T, c *Conn, ids ...wire.LeaseID) uint64 {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wbuf = wire.AppendRequest(c.wbuf[:0], &wire.RequestHeader{Op: wire.OpRelease, Offset: uint64(len(ids)), BodyLen: uint64(len(ids)) * wire.LeaseIDLen})
	for _, id := range ids {
		c.wbuf = binary.LittleEndian.AppendUint64(c.wbuf, uint64(id))
	}
	if err := c.send(); err != nil {
		t.Fatal(err)
	}
	var p [wire.ResponsePrefixLen]byte
	if _, err := io.ReadFull(c.br, p[:]); err != nil {
		t.Fatal(err)
	}
	h, err := wire.DecodeResponse(p[:])
	if err != nil || h.Status != wire.StatusOK {
		t.Fatalf("RELEASE: %+v %v", h, err)
	}
	return h.Stored
}

// TestForeignLeaseRefused: a connection cannot end another's lease, nor
// one that never existed; the owner's lease stays live until the owner
// releases it or its connection closes.
func TestForeignLeaseRefused(t *testing.T) {
	r := newRig(t, nil)
	if err := r.tier.Put(key(1), value(1, 1000)); err != nil {
		t.Fatal(err)
	}
	a, b := r.dial(nil), r.dial(nil)
	if _, err := a.Get(key(1), 0, 0, make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	held := a.pending[0]
	if n := rawRelease(t, b, held, held+1, wire.LeaseID(uint64(1)<<40|1)); n != 0 {
		t.Fatalf("another connection ended %d leases", n)
	}
	if st := r.node.Stats().Leases; st.Live != 1 || st.Refused < 2 {
		t.Fatalf("after foreign releases: %+v, want the lease live and the refusals counted", st)
	}
	a.pending = a.pending[:0]
	if n := rawRelease(t, a, held); n != 1 {
		t.Fatalf("the owner ended %d leases, want 1", n)
	}
	// Release on close: a lease the client never releases ends with its
	// connection.
	if _, err := b.Get(key(1), 0, 0, make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	b.Close()
	r.waitEnded()
	if st := r.node.Stats().Leases; st.Live != 0 {
		t.Fatalf("after the holder closed: %+v", st)
	}
}

// TestWrongRKeyFailsCleanly: a READ with a key the node never gave
// completes with a remote access error and writes nothing; the call
// fails, the connection is broken, and the node ends its leases.
func TestWrongRKeyFailsCleanly(t *testing.T) {
	r := newRig(t, nil)
	if err := r.tier.Put(key(1), value(1, 2000)); err != nil {
		t.Fatal(err)
	}
	c := r.dial(nil)
	c.remote.ArenaKey ^= 0xff00
	dst := make([]byte, 2000)
	_, err := c.Get(key(1), 0, 0, dst)
	if err == nil || !strings.Contains(err.Error(), "remote access error") {
		t.Fatalf("READ with a wrong rkey: %v", err)
	}
	if !bytes.Equal(dst, make([]byte, 2000)) {
		t.Fatal("the destination was written")
	}
	if _, err := c.Get(key(1), 0, 0, dst); err == nil {
		t.Fatal("a broken connection served another call")
	}
	r.waitEnded()
	if st := r.node.Stats().Leases; st.Live != 0 || st.Granted != 1 {
		t.Fatalf("leases after the broken connection: %+v", st)
	}
}

// TestDroppedMidBatch: the connection breaks while a batch's READs are in
// flight; they complete flushed, the call fails, later calls fail, and
// the node ends the connection's leases.
func TestDroppedMidBatch(t *testing.T) {
	r := newRig(t, nil)
	items := make([]GetItem, 8)
	dst := make([][]byte, 8)
	for i := range items {
		if err := r.tier.Put(key(uint64(i)), value(byte(i), 3000)); err != nil {
			t.Fatal(err)
		}
		items[i], dst[i] = GetItem{Key: key(uint64(i))}, make([]byte, 3000)
	}
	c := r.dial(nil)
	var reads atomic.Int32
	r.fake.SetHook(func(op FakeOp) FakeFault {
		if reads.Add(1) == 5 {
			return FaultBreak
		}
		return FaultNone
	})
	err := c.GetBatch(items, dst, make([]GetResult, 8))
	if err == nil || !strings.Contains(err.Error(), "flushed") || !errors.Is(err, wire.StatusUnavailable) {
		t.Fatalf("batch over a dropped connection: %v", err)
	}
	if reads.Load() != 16 {
		t.Fatalf("%d work requests executed or flushed, want all 16", reads.Load())
	}
	if err := c.PutBatch([]wire.BlockKey{key(1)}, [][]byte{{1}}, make([]error, 1)); err == nil {
		t.Fatal("a broken connection served another call")
	}
	r.waitEnded()
	if st := r.node.Stats().Leases; st.Live != 0 || st.Granted != 8 {
		t.Fatalf("leases after the drop: %+v", st)
	}
}

// TestCallTimeout: a completion later than the call's deadline fails the
// call with TIMEOUT (one deadline for the whole call).
func TestCallTimeout(t *testing.T) {
	r := newRig(t, nil)
	if err := r.tier.Put(key(1), value(1, 100)); err != nil {
		t.Fatal(err)
	}
	c := r.dial(func(o *ClientOptions) { o.OpTimeout = 50 * time.Millisecond })
	r.fake.SetHook(func(FakeOp) FakeFault {
		time.Sleep(200 * time.Millisecond) // a slow fabric
		return FaultNone
	})
	if _, err := c.Get(key(1), 0, 0, make([]byte, 100)); !errors.Is(err, wire.StatusTimeout) {
		t.Fatalf("slow completion: %v, want TIMEOUT", err)
	}
	r.waitEnded()
}

// TestBootstrapEpochRefused: a bootstrap of another epoch, or a TCP
// request on the RDMA port, is refused with the reason.
func TestBootstrapEpochRefused(t *testing.T) {
	r := newRig(t, nil)
	for _, tc := range []struct {
		epoch uint8
		want  string
	}{{8, "RDMA bootstrap of epoch 8"}, {wire.EpochTCP, "a TCP request (epoch 6)"}} {
		_, err := r.dialErr(func(o *ClientOptions) { o.epoch = tc.epoch })
		if !errors.Is(err, wire.StatusEpochMismatch) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("epoch %d: %v, want an EPOCH_MISMATCH saying %q", tc.epoch, err, tc.want)
		}
		r.waitEnded()
	}
	if st := r.node.Stats(); st.Conns != 0 {
		t.Fatalf("refused bootstraps left %d connections", st.Conns)
	}
}

// TestNoArena: a node without a RAM tier leases nothing; every value
// comes inline.
func TestNoArena(t *testing.T) {
	r := newRig(t, func(o *NodeOptions) { o.Arena = nil })
	if err := r.tier.Put(key(1), value(5, 700)); err != nil {
		t.Fatal(err)
	}
	c := r.dial(nil)
	dst := make([]byte, 700)
	if res, err := c.Get(key(1), 0, 0, dst); err != nil || res.Err != nil || !bytes.Equal(dst[:res.N], value(5, 700)) {
		t.Fatalf("inline get: %+v %v", res, err)
	}
	if c.welcome.ArenaBytes != 0 || r.node.Stats().Leases.Granted != 0 {
		t.Fatal("a node without an arena announced or leased one")
	}
}

// TestWithoutVerbs: in a build without the ibverbs tag, a node and a client
// without a provider refuse with how to build one.
func TestWithoutVerbs(t *testing.T) {
	if _, err := DefaultProvider(); err == nil {
		t.Skip("built with a verbs library")
	}
	if _, err := NewNode(newPipeListener(), NodeOptions{Engine: newMemEngine()}); !errors.Is(err, ErrNotBuilt) || !strings.Contains(err.Error(), "-tags ibverbs") {
		t.Fatalf("node: %v", err)
	}
	if err := Check(""); !errors.Is(err, ErrNotBuilt) {
		t.Fatalf("check: %v", err)
	}
	if _, err := NewNode(newPipeListener(), NodeOptions{Provider: NewFakeNone(), Engine: newMemEngine()}); err == nil || !strings.Contains(err.Error(), "no RDMA device") {
		t.Fatalf("node on a host without a device: %v", err)
	}
}
