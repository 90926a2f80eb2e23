package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dfkv/dfkv/wire"
)

// dirMDS plays several MDS addresses sharing one directory (as MDS
// processes on one etcd do). A request takes effect on the directory as
// soon as it arrives; the answer then leaves after the address's lag (an
// MDS whose etcd committed the delete but is slow with the rest of the
// request, e.g. the lease revoke, or a slow link back). An address in
// silent takes the request and never answers.
type dirMDS struct {
	mu      sync.Mutex
	epoch   uint64
	members map[string]bool
	lag     map[string]time.Duration
	silent  map[string]bool
	dials   []string
}

func newDirMDS(ids ...string) *dirMDS {
	d := &dirMDS{epoch: 1, members: map[string]bool{}, lag: map[string]time.Duration{}, silent: map[string]bool{}}
	for _, id := range ids {
		d.members[id] = true
	}
	return d
}

func (d *dirMDS) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	d.dials = append(d.dials, addr)
	lag, silent := d.lag[addr], d.silent[addr]
	d.mu.Unlock()
	cli, srv := net.Pipe()
	go func() {
		defer srv.Close()
		var hdr [wire.RequestPrefixLen]byte
		if _, err := io.ReadFull(srv, hdr[:]); err != nil {
			return
		}
		op, _, n, err := wire.DecodeMDSRequest(hdr[:])
		if err != nil {
			return
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(srv, body); err != nil {
			return
		}
		if silent {
			_, _ = io.Copy(io.Discard, srv)
			return
		}
		var req wire.MDSRequest
		_ = json.Unmarshal(body, &req)
		st, out := wire.StatusOK, []byte(nil)
		d.mu.Lock()
		switch op {
		case wire.OpMDSDeregister, wire.OpMDSHeartbeat:
			if !d.members[req.ID] {
				st, out = wire.StatusNotFound, []byte("unknown member "+req.ID)
			} else if op == wire.OpMDSDeregister {
				delete(d.members, req.ID)
				d.epoch++
			}
		case wire.OpMDSRegister:
			d.members[req.Member.ID] = true
			d.epoch++
			out, _ = json.Marshal(wire.MDSReply{Epoch: d.epoch, HeartbeatTTLMS: 9000})
		}
		epoch := d.epoch
		d.mu.Unlock()
		time.Sleep(lag)
		_, _ = srv.Write(append(wire.AppendMDSResponse(nil, st, epoch, len(out)), out...))
	}()
	return cli, nil
}

// TestHedgedDeregisterThatSucceededIsOK: two MDS addresses on one
// directory. The first (the one the node used) takes the DEREGISTER and
// removes the node at once, but its answer is slow (2 s of the
// registrar's 3 s). At the hedge (1.5 s) the second address is asked; the
// node is gone, so it answers NOT_FOUND. The first attempt's OK, still to
// come, is the answer: the node did leave, and a NOT_FOUND would make it
// stop without its drain.
func TestHedgedDeregisterThatSucceededIsOK(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDirMDS("n1")
		d.lag["mds1.test:7000"] = 2 * time.Second
		m, err := NewMDSClient([]string{"mds1.test:7000", "mds2.test:7000"}, "g", d, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		// Registrar.deregister's context.
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		start := time.Now()
		err = m.Deregister(ctx, "n1")
		took := time.Since(start)
		time.Sleep(5 * time.Second) // let the fake MDS's slow answer finish
		d.mu.Lock()
		left := !d.members["n1"]
		dials := append([]string(nil), d.dials...)
		d.mu.Unlock()
		if !left {
			t.Fatalf("setup: n1 still in the directory")
		}
		if err != nil {
			t.Fatalf("Deregister after %v: %v (status %v); the node was removed by the first MDS, whose OK arrived at 2s of the 3s call (dials %v)",
				took, err, wire.StatusOf(err), dials)
		}
	})
}

// TestHedgeCancelEndsEveryAttempt: three silent addresses, the call's
// context cancelled after the first hedge. The call returns at once, and
// synctest.Test returning shows no attempt goroutine is left.
func TestHedgeCancelEndsEveryAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDirMDS("n1")
		for _, a := range []string{"a.test:1", "b.test:1", "c.test:1"} {
			d.silent[a] = true
		}
		m, _ := NewMDSClient([]string{"a.test:1", "b.test:1", "c.test:1"}, "g", d, 10*time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), 9*time.Second)
		defer cancel()
		go func() { time.Sleep(4 * time.Second); cancel() }()
		start := time.Now()
		_, err := m.Heartbeat(ctx, "n1")
		if took := time.Since(start); took != 4*time.Second {
			t.Fatalf("took %v, want 4s (the cancel)", took)
		}
		if !errors.Is(err, wire.StatusUnavailable) {
			t.Fatalf("err %v", err)
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		if len(d.dials) != 2 {
			t.Fatalf("dials %v, want a and b (hedge at 3s, the next at 6s)", d.dials)
		}
	})
}

// TestHedgeWinnerIsNext: a silent first address; the second answers after
// the hedge; the next call starts at the second, and a register's reply
// is the winner's.
func TestHedgeWinnerIsNext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDirMDS()
		d.silent["a.test:1"] = true
		m, _ := NewMDSClient([]string{"a.test:1", "b.test:1"}, "g", d, 10*time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
		defer cancel()
		rep, err := m.Register(ctx, wire.MemberInfo{ID: "n1", Addr: "n1.test:1", Weight: 1})
		if err != nil || rep.HeartbeatTTLMS != 9000 {
			t.Fatalf("register: %+v %v", rep, err)
		}
		m.mu.Lock()
		next := m.next
		m.mu.Unlock()
		if next != 1 {
			t.Fatalf("next %d", next)
		}
		d.mu.Lock()
		d.dials = nil
		d.mu.Unlock()
		ctx2, cancel2 := context.WithTimeout(context.Background(), 4*time.Second)
		defer cancel2()
		if _, err := m.Heartbeat(ctx2, "n1"); err != nil {
			t.Fatal(err)
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		if len(d.dials) != 1 || d.dials[0] != "b.test:1" {
			t.Fatalf("dials %v", d.dials)
		}
	})
}
