package ctl

import (
	"context"
	"log/slog"
	"maps"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dfkv/dfkv/config"
	"github.com/dfkv/dfkv/roles/internal/testetcd"
	"github.com/dfkv/dfkv/roles/mds"
	"github.com/dfkv/dfkv/wire"
)

// TestLastHeartbeatColumn: a time where the directory has one, "lease
// live" where it holds the member on a lease and keeps no time, "-" where
// nothing is known.
func TestLastHeartbeatColumn(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	for _, c := range []struct {
		m    wire.MemberInfo
		want string
	}{
		{wire.MemberInfo{LastHeartbeatUnixMS: 1_000_000 - 2500}, "2.5s ago"},
		{wire.MemberInfo{LeaseLive: true}, "lease live"},
		{wire.MemberInfo{}, "-"},
		{wire.MemberInfo{LastHeartbeatUnixMS: time.Time{}.UnixMilli()}, "-"}, // an MDS that has not heard from it since it restarted
	} {
		if got := lastHeartbeat(c.m, now); got != c.want {
			t.Errorf("%+v: %q, want %q", c.m, got, c.want)
		}
	}
}

// startMDS runs an MDS in-process with the flags given and returns its
// control address.
func startMDS(t *testing.T, flags map[string][]string) string {
	t.Helper()
	flags = maps.Clone(flags)
	flags["http-listen"] = []string{""}
	cfg, _, err := config.LoadFrom("mds", "", nil, flags)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ready := make(chan struct{})
	go func() {
		done <- mds.Run(ctx, cfg, mds.Deps{Listener: ln, Logger: slog.New(slog.DiscardHandler), Ready: func() { close(ready) }})
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("mds did not start: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("mds: %v", err)
		}
	})
	return ln.Addr().String()
}

// memberRow runs `ctl --mds mdsAddr members` until it lists addr (the
// node registers in the background) and returns the whole output and
// addr's row.
func memberRow(t *testing.T, mdsAddr, addr string) (out, row string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, out, errs := runCtl(t, "", "--mds", mdsAddr, "members")
		for _, line := range strings.Split(out, "\n") {
			if code == 0 && strings.Contains(line, " "+addr+" ") {
				return out, line
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("ctl members never listed %s: exit %d\n%s%s", addr, code, out, errs)
		}
		time.Sleep(50 * time.Millisecond) // polling: the node registers on its own
	}
}

// TestMembersLastHeartbeatBolt: with the bbolt directory, which records
// every heartbeat it serves, the column is how long ago that was.
func TestMembersLastHeartbeatBolt(t *testing.T) {
	ctrl := startMDS(t, map[string][]string{"db-path": {filepath.Join(t.TempDir(), "mds.db")}})
	node := startNode(t, map[string][]string{"mds": {ctrl}})
	out, row := memberRow(t, ctrl, node)
	if !strings.Contains(row, " ago ") || strings.Contains(out, "lease live") {
		t.Fatalf("bbolt directory: the row of %s shows no heartbeat time:\n%s", node, out)
	}
}

// TestMembersLastHeartbeatEtcd: with etcd, where no MDS knows when a node
// last heartbeated (it may do so through any of them), the column says
// the lease is live instead of a time, here asked of an MDS other than the
// one the node registered and heartbeats with. (It showed the time of the
// registration, growing while the node heartbeated elsewhere.)
func TestMembersLastHeartbeatEtcd(t *testing.T) {
	etcd := testetcd.Start(t)
	flags := map[string][]string{"etcd-endpoints": {etcd.Endpoint}}
	a, b := startMDS(t, flags), startMDS(t, flags)
	node := startNode(t, map[string][]string{"mds": {a}})
	out, row := memberRow(t, b, node)
	if !strings.Contains(row, " lease live ") || strings.Contains(row, " ago ") || !strings.Contains(out, "# lease live: the directory (etcd) keeps no heartbeat times") {
		t.Fatalf("etcd directory: the row of %s does not say the lease is live (or says a time):\n%s", node, out)
	}
}
