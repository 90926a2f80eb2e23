package mds

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/dfkv/dfkv/wire"
)

// TestSettleNeverHandsAClientAnOlderList: the settle window serves the
// list this MDS last read before an etcd outage. That list may be older
// than what a client already holds: a node left (DEREGISTER, or benched
// for failed disks) after this MDS's last full read, and the client
// learned it from another MDS. Epochs only grow: that client keeps its
// own list rather than get the departed node back.
func TestSettleNeverHandsAClientAnOlderList(t *testing.T) {
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
		t.Fatalf("before: %d %v %v", epoch, ms, err)
	}
	// node-3 deregisters (through another MDS, or this one); the
	// clients, polling another MDS, hold {node-1, node-2} at epoch 9.
	d.members, d.epoch = []wire.MemberInfo{member(1), member(2)}, 9
	// A short etcd blip: one failed probe, no lease runs out.
	d.down.Store(true)
	if err := probe.checkNow(ctx); err == nil {
		t.Fatal("probe during the blip succeeded")
	}
	d.down.Store(false)
	if err := probe.checkNow(ctx); err != nil {
		t.Fatal(err)
	}
	epoch, ms, changed, err := c.Members(ctx, 9)
	if err != nil {
		t.Fatal(err)
	}
	if changed {
		t.Fatalf("a client holding 2 members at epoch 9 was handed %d members at the older epoch %d (%v): the departed node-3 is back in its ring", len(ms), epoch, ids(ms))
	}
}

func ids(ms []wire.MemberInfo) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}
