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

// downDir is a directory whose backend can be taken down: Members and
// Epoch then fail as an unreachable etcd does.
type downDir struct {
	Directory
	down    atomic.Bool
	members []wire.MemberInfo
}

var errBackendDown = fmt.Errorf("directory backend unavailable: context deadline exceeded: %w", wire.StatusUnavailable)

func (d *downDir) Members(context.Context, string) (uint64, []wire.MemberInfo, error) {
	if d.down.Load() {
		return 0, nil, errBackendDown
	}
	return 7, d.members, nil
}

func (d *downDir) Epoch(context.Context, string) (uint64, error) {
	if d.down.Load() {
		return 0, errBackendDown
	}
	return 7, nil
}

// TestMembersServedWhileBackendDown: with its backend down, the MDS
// answers MEMBERS with the last list it served (counted), so a client
// starting during an etcd outage can open and route, and one that knows
// that epoch hears it is unchanged; an MDS that never served the group
// still reports the outage.
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
	if _, _, changed, err := mdsClient(t, "default", addr).Members(context.Background(), 7); err != nil || changed {
		t.Fatalf("MEMBERS at the known epoch with the backend down: changed=%v %v", changed, err)
	}
	if n := cs.staleReplies.Load(); n != 2 {
		t.Fatalf("stale replies counted %d, want 2", n)
	}
}
