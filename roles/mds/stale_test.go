package mds

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dfkv/dfkv/wire"
)

// downDir is a directory whose backend can be taken down: Members then
// fails as an unreachable etcd does, and Epoch too unless memEpoch is set
// (etcd's directory answers Epoch from memory, whatever etcd does).
type downDir struct {
	Directory
	down     atomic.Bool
	memEpoch bool
	epoch    uint64 // 0: 7
	members  []wire.MemberInfo
}

func (d *downDir) at() uint64 {
	if d.epoch == 0 {
		return 7
	}
	return d.epoch
}

var errBackendDown = fmt.Errorf("directory backend unavailable: context deadline exceeded: %w", wire.StatusUnavailable)

func (d *downDir) Members(context.Context, string) (uint64, []wire.MemberInfo, error) {
	if d.down.Load() {
		return 0, nil, errBackendDown
	}
	return d.at(), d.members, nil
}

func (d *downDir) Epoch(context.Context, string) (uint64, error) {
	if d.down.Load() && !d.memEpoch {
		return 0, errBackendDown
	}
	return d.at(), nil
}

// TestMembersServedWhileBackendDown: with its backend down, the MDS
// answers a new client's MEMBERS with the last list it served (counted),
// so a client starting during an etcd outage can open and route; a client
// that holds a list is told UNAVAILABLE, so it asks another MDS; an MDS
// that never served the group reports the outage.
func TestMembersServedWhileBackendDown(t *testing.T) {
	d := &downDir{members: []wire.MemberInfo{member(1), member(2)}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cs := &controlServer{dir: d, ln: ln, log: slog.New(slog.DiscardHandler), ttl: 10 * time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go cs.serve(ctx)
	addr := ln.Addr().String()

	d.down.Store(true)
	if _, _, _, err := mdsClient(t, "default", addr).Members(context.Background(), 0); !errors.Is(err, wire.StatusUnavailable) {
		t.Fatalf("MEMBERS with the backend down and nothing served yet: %v, want UNAVAILABLE", err)
	}
	d.down.Store(false)
	if epoch, ms, _, err := mdsClient(t, "default", addr).Members(context.Background(), 0); err != nil || epoch != 7 || len(ms) != 2 {
		t.Fatalf("MEMBERS with the backend up: %d %v %v", epoch, ms, err)
	}

	d.down.Store(true)
	epoch, ms, changed, err := mdsClient(t, "default", addr).Members(context.Background(), 0)
	if err != nil || epoch != 7 || len(ms) != 2 || !changed || ms[0].ID != "node-1" {
		t.Fatalf("a new client's MEMBERS with the backend down: %d %v changed=%v %v; want the last list", epoch, ms, changed, err)
	}
	if _, _, _, err := mdsClient(t, "default", addr).Members(context.Background(), 7); !errors.Is(err, wire.StatusUnavailable) {
		t.Fatalf("MEMBERS at a known epoch with the backend down: %v, want UNAVAILABLE", err)
	}
	if n := cs.staleReplies.Load(); n != 1 {
		t.Fatalf("stale replies counted %d, want 1", n)
	}
}

// blockingDir is a directory whose backend does not answer: Members waits
// until its caller gives up, as a call to a stopped etcd does.
type blockingDir struct {
	downDir
	calls atomic.Int64
}

func (d *blockingDir) Members(ctx context.Context, g string) (uint64, []wire.MemberInfo, error) {
	if !d.down.Load() {
		return d.downDir.Members(ctx, g)
	}
	d.calls.Add(1)
	<-ctx.Done()
	return 0, nil, errBackendDown
}

// TestNewClientAnsweredAtOnceWhileBackendDown: once the MDS's probe knows
// its backend is down, a new client's MEMBERS is answered from the last
// list without asking the backend, which would hold the client for the
// backend's timeout (past the client's own, with a short one).
func TestNewClientAnsweredAtOnceWhileBackendDown(t *testing.T) {
	d := &blockingDir{downDir: downDir{members: []wire.MemberInfo{member(1), member(2)}}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cs := &controlServer{dir: d, ln: ln, log: slog.New(slog.DiscardHandler), ttl: 10 * time.Second, backendDown: d.down.Load}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go cs.serve(ctx)
	addr := ln.Addr().String()
	if _, ms, _, err := mdsClient(t, "default", addr).Members(ctx, 0); err != nil || len(ms) != 2 {
		t.Fatalf("before the outage: %v %v", ms, err)
	}
	d.down.Store(true)
	epoch, ms, _, err := mdsClient(t, "default", addr).Members(ctx, 0)
	if err != nil || epoch != 7 || len(ms) != 2 {
		t.Fatalf("a new client during the outage: %d %v %v; want the last list", epoch, ms, err)
	}
	if n := d.calls.Load(); n != 0 {
		t.Fatalf("the backend was asked %d times while known to be down", n)
	}
}

// TestPartitionedMDSSendsClientsOn: an MDS cut off from etcd by a
// partition still knows an epoch (its watch just stopped, without an
// error), so it used to answer every client holding that epoch
// "unchanged" for as long as the partition lasted, while another MDS saw
// the members change. With its backend probe failing it skips that
// answer and says UNAVAILABLE, and a client with both MDS addresses gets
// the other's current list.
func TestPartitionedMDSSendsClientsOn(t *testing.T) {
	serve := func(d Directory, down func() bool) (string, *controlServer) {
		t.Helper()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		cs := &controlServer{dir: d, ln: ln, log: slog.New(slog.DiscardHandler), ttl: 10 * time.Second, backendDown: down}
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		go cs.serve(ctx)
		return ln.Addr().String(), cs
	}
	cut := &downDir{members: []wire.MemberInfo{member(1), member(2)}, memEpoch: true}
	cutAddr, _ := serve(cut, cut.down.Load)
	ctx := context.Background()
	if epoch, ms, _, err := mdsClient(t, "default", cutAddr).Members(ctx, 0); err != nil || epoch != 7 || len(ms) != 2 {
		t.Fatalf("before the partition: %d %v %v", epoch, ms, err)
	}
	cut.down.Store(true)
	if _, _, _, err := mdsClient(t, "default", cutAddr).Members(ctx, 7); !errors.Is(err, wire.StatusUnavailable) {
		t.Fatalf("a client at epoch 7 asking the cut-off MDS: %v, want UNAVAILABLE, not unchanged", err)
	}
	healthy := &downDir{members: []wire.MemberInfo{member(1)}}
	healthy.epoch = 9
	healthyAddr, _ := serve(healthy, nil)
	epoch, ms, changed, err := mdsClient(t, "default", cutAddr, healthyAddr).Members(ctx, 7)
	if err != nil || !changed || epoch != 9 || len(ms) != 1 {
		t.Fatalf("a client with both MDS: %d %v changed=%v %v; want the healthy MDS's list at epoch 9", epoch, ms, changed, err)
	}
}

// TestMassExpirySettles: the backend comes back from an outage with the
// leases run out (one member of three left); for a heartbeat TTL the MDS
// answers with the three of before, to clients that hold them and to new
// ones, until the nodes have registered again, and afterwards the fresh
// list. A member that does not come back leaves when the window ends.
func TestMassExpirySettles(t *testing.T) {
	d := &downDir{members: []wire.MemberInfo{member(1), member(2), member(3)}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cs := &controlServer{dir: d, ln: ln, log: slog.New(slog.DiscardHandler), ttl: 300 * time.Millisecond, backendDown: d.down.Load}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go cs.serve(ctx)
	addr := ln.Addr().String()
	ask := func(known uint64) (uint64, []wire.MemberInfo, bool) {
		t.Helper()
		epoch, ms, changed, err := mdsClient(t, "default", addr).Members(ctx, known)
		if err != nil {
			t.Fatal(err)
		}
		return epoch, ms, changed
	}
	if epoch, ms, _ := ask(0); epoch != 7 || len(ms) != 3 {
		t.Fatalf("before the outage: %d %v", epoch, ms)
	}
	d.down.Store(true)
	d.members, d.epoch = []wire.MemberInfo{member(2)}, 9 // the leases ran out meanwhile
	d.down.Store(false)
	cs.backendReturned(time.Now())
	if _, _, changed := ask(7); changed {
		t.Fatal("a client holding the three was handed the one left")
	}
	if epoch, ms, _ := ask(0); epoch != 7 || len(ms) != 3 {
		t.Fatalf("a new client during the settle window: %d %v", epoch, ms)
	}
	d.members, d.epoch = []wire.MemberInfo{member(1), member(2), member(3)}, 12 // registered again
	if epoch, ms, changed := ask(7); !changed || epoch != 12 || len(ms) != 3 {
		t.Fatalf("after the nodes registered again: %d %v changed=%v", epoch, ms, changed)
	}
	if cs.settledReplies.Load() != 2 {
		t.Fatalf("settled replies %d, want 2", cs.settledReplies.Load())
	}
	// A second outage in which one node dies for good: after the window
	// its absence is served.
	d.members, d.epoch = []wire.MemberInfo{member(1), member(3)}, 14
	cs.backendReturned(time.Now())
	if _, ms, _ := ask(0); len(ms) != 3 {
		t.Fatalf("in the window: %v", ms)
	}
	time.Sleep(400 * time.Millisecond)
	if epoch, ms, _ := ask(12); epoch != 14 || len(ms) != 2 {
		t.Fatalf("after the window: %d %v", epoch, ms)
	}
}

// probeDir is a downDir whose Probe answers as the rest of it does.
type probeDir struct{ downDir }

func (d *probeDir) Probe(context.Context) error {
	if d.down.Load() {
		return errBackendDown
	}
	return nil
}

// Whichever probe finds the backend back first (here /readyz's, before
// the 2 s watcher's), the settle window is open before MEMBERS reads the
// backend again: a client holding the list of before the outage is not
// handed the one the outage shrank.
func TestSettleWindowOpensOnAnyProbe(t *testing.T) {
	d := &probeDir{downDir{members: []wire.MemberInfo{member(1), member(2), member(3)}, epoch: 7}}
	probe := &probeCache{dir: d}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cs := &controlServer{dir: d, ln: ln, log: slog.New(slog.DiscardHandler), ttl: 10 * time.Second, backendDown: probe.down}
	probe.recovered = cs.backendReturned
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go cs.serve(ctx)
	c := mdsClient(t, "default", ln.Addr().String())
	if epoch, ms, _, err := c.Members(ctx, 0); err != nil || epoch != 7 || len(ms) != 3 {
		t.Fatalf("before the outage: %d %v %v", epoch, ms, err)
	}
	d.down.Store(true)
	if err := probe.checkNow(ctx); err == nil || !probe.down() {
		t.Fatalf("the probe during the outage: %v, down %v", err, probe.down())
	}
	d.members, d.epoch = []wire.MemberInfo{member(2)}, 9 // the leases ran out meanwhile
	d.down.Store(false)
	if err := probe.check(ctx); err != nil { // a /readyz, not the watcher
		t.Fatal(err)
	}
	if epoch, ms, changed, err := c.Members(ctx, 7); err != nil || changed {
		t.Fatalf("a client holding 3 members got %d at epoch %d (%v) right after the backend returned", len(ms), epoch, err)
	}
}
