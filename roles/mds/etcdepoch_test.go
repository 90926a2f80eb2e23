package mds

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dfkv/dfkv/config"
	"github.com/dfkv/dfkv/roles/internal/testetcd"
)

// TestReadEpoch: a list read at revision read carries the group's last
// change only when the watch has delivered every change up to read and
// none past it; otherwise read itself.
func TestReadEpoch(t *testing.T) {
	for _, c := range []struct {
		read, lastPut, lastChange, watched, want uint64
	}{
		{read: 10, lastPut: 7, lastChange: 9, watched: 10, want: 9},   // a delete at 9, delivered
		{read: 10, lastPut: 7, lastChange: 7, watched: 12, want: 7},   // nothing since the put at 7
		{read: 10, lastPut: 8, lastChange: 7, watched: 10, want: 8},   // a put the watch missed
		{read: 10, lastPut: 7, lastChange: 7, watched: 8, want: 10},   // the watch is behind the read
		{read: 10, lastPut: 7, lastChange: 11, watched: 11, want: 10}, // the watch is past the read
	} {
		if got := readEpoch(c.read, c.lastPut, c.lastChange, c.watched); got != c.want {
			t.Errorf("readEpoch(read %d, lastPut %d, lastChange %d, watched %d) = %d, want %d",
				c.read, c.lastPut, c.lastChange, c.watched, got, c.want)
		}
	}
}

// TestEtcdListsNeverShareAnEpoch: with the watch held back (as it is for
// a few milliseconds after every change), a member whose key vanishes
// (a lease expiry, another MDS's deregister) changes the epoch of the
// list at once. Before, the shorter list came with the longer list's
// epoch, and a client holding that epoch was told "unchanged" and kept
// routing to the departed node until the watch caught up. A real etcd.
func TestEtcdListsNeverShareAnEpoch(t *testing.T) {
	d, cli := etcdDirForTest(t)
	ctx := context.Background()
	// Hold the watch back: stop it after its first read, which closes
	// the advanced channel of the moment.
	timeout := time.After(10 * time.Second)
	for {
		d.mu.Lock()
		w, advanced := d.watched, d.advanced
		d.mu.Unlock()
		if w > 0 {
			break
		}
		select {
		case <-advanced:
		case <-timeout:
			t.Fatal("the watch never made its first read")
		}
	}
	d.cancel()
	<-d.done
	d.done = make(chan struct{})
	close(d.done) // Close waits on it

	for i := 1; i <= 2; i++ {
		if _, err := d.Register(ctx, "g", member(i), nil); err != nil {
			t.Fatal(err)
		}
	}
	e1, ms, err := d.Members(ctx, "g")
	if err != nil || len(ms) != 2 {
		t.Fatalf("members after two registrations: %+v %v", ms, err)
	}
	if _, err := cli.Delete(ctx, d.memberKey("g", member(2).ID)); err != nil {
		t.Fatal(err)
	}
	e2, ms, err := d.Members(ctx, "g")
	if err != nil || len(ms) != 1 || ms[0].ID != member(1).ID {
		t.Fatalf("members after node-2's key went: %+v %v", ms, err)
	}
	if e2 == e1 {
		t.Fatalf("the list without node-2 came with the epoch of the list with it (%d)", e1)
	}
	// The same state read again keeps an epoch that names it; an
	// unchanged list may come with a new epoch (a refetch), never a
	// changed one with an old epoch.
	if e3, ms, err := d.Members(ctx, "g"); err != nil || len(ms) != 1 || e3 == e1 {
		t.Fatalf("reread: %d members at epoch %d (the two-member list had %d): %v", len(ms), e3, e1, err)
	}
}

// TestEtcdOutageLogged: an MDS on etcd logs losing it (one WARN saying what
// it does meanwhile) and getting it back (one INFO with the outage's
// length), with nothing scraping /readyz; its start line names etcd, not
// the bbolt file it does not use.
func TestEtcdOutageLogged(t *testing.T) {
	etcd := testetcd.Start(t)
	cfg, _, err := config.LoadFrom("mds", "", nil, map[string][]string{"etcd": {etcd.Endpoint}, "probe-cache-ms": {"0"}, "http-listen": {""}})
	if err != nil {
		t.Fatal(err)
	}
	logs := &logSink{}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, cfg, Deps{Listener: ln, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("mds: %v", err)
		}
	}()
	waitFor := func(what string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !strings.Contains(logs.String(), what) {
			if time.Now().After(deadline) {
				t.Fatalf("no %q in the log within 20 s:\n%s", what, logs.String())
			}
			time.Sleep(50 * time.Millisecond) // polling: the MDS probes etcd on its own ticker
		}
	}
	waitFor("dfkv mds listening")
	if line := logs.String(); strings.Contains(line, "db=") || !strings.Contains(line, "etcd=") {
		t.Errorf("start line of an etcd MDS: %s", line)
	}
	etcd.Stop()
	waitFor("MDS: etcd unreachable")
	etcd.Restart(t)
	waitFor("MDS: etcd reachable again")
	if n := strings.Count(logs.String(), "MDS: etcd unreachable"); n != 1 {
		t.Errorf("%d unreachable lines for one outage:\n%s", n, logs.String())
	}
}

// TestEtcdEpochIgnoresOtherWrites: on an etcd other applications write to,
// an unchanged member list keeps its epoch (so clients are told
// "unchanged" and the MDS's reply cache serves them), while a change to it
// still moves the epoch. Before the watch asked etcd for progress notices,
// every foreign write gave the next list a new epoch: a full read and a
// full reply on every poll.
func TestEtcdEpochIgnoresOtherWrites(t *testing.T) {
	d, cli := etcdDirForTest(t)
	ctx := context.Background()
	for i := 1; i <= 2; i++ {
		if _, err := d.Register(ctx, "g", member(i), nil); err != nil {
			t.Fatal(err)
		}
	}
	e1, ms, err := d.Members(ctx, "g")
	if err != nil || len(ms) != 2 {
		t.Fatalf("members: %+v %v", ms, err)
	}
	for i := range 10 {
		if _, err := cli.Put(ctx, fmt.Sprintf("/other-app/key-%d", i), "x"); err != nil {
			t.Fatal(err)
		}
		e, ms, err := d.Members(ctx, "g")
		if err != nil || len(ms) != 2 {
			t.Fatalf("members after a foreign write: %+v %v", ms, err)
		}
		if e != e1 {
			t.Fatalf("after foreign write %d the unchanged list's epoch went from %d to %d", i, e1, e)
		}
	}
	if _, err := cli.Delete(ctx, d.memberKey("g", member(2).ID)); err != nil {
		t.Fatal(err)
	}
	if e, ms, err := d.Members(ctx, "g"); err != nil || len(ms) != 1 || e == e1 {
		t.Fatalf("after node-2 left: %d members at epoch %d (was %d): %v", len(ms), e, e1, err)
	}
}

// etcdDirForTest opens an etcd directory under /dfkv on a real etcd of
// its own, and a plain client of that etcd to change it behind the
// directory's back.
func etcdDirForTest(t *testing.T) (*etcdDir, *clientv3.Client) {
	t.Helper()
	etcd := testetcd.Start(t)
	d, err := openEtcdDir([]string{etcd.Endpoint}, "/dfkv", 5*time.Second, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd.Endpoint}, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return d, cli
}

// TestEtcdLeaseNotFoundIsTyped: the answer of a real etcd to renewing a
// lease it does not hold is recognised by its type (a heartbeat then
// says "register again"), wrapped or not; an error that merely reads the
// same is not.
func TestEtcdLeaseNotFoundIsTyped(t *testing.T) {
	_, cli := etcdDirForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := cli.KeepAliveOnce(ctx, clientv3.LeaseID(0x7fff_0000_dead_beef))
	if !isLeaseNotFound(err) {
		t.Fatalf("renewing an unknown lease: %v (%T), want etcd's lease-not-found", err, err)
	}
	if !isLeaseNotFound(fmt.Errorf("heartbeat: %w", err)) {
		t.Fatal("a wrapped lease-not-found is not recognised")
	}
	if isLeaseNotFound(errors.New(err.Error())) || isLeaseNotFound(nil) {
		t.Fatal("an error that only reads like lease-not-found is taken for it")
	}
}

// A heartbeat on etcd answers the TTL of the node's lease, the one it was
// granted at registration, not this MDS's heartbeat_ttl_ms: a node
// registered through an MDS of 2 s, heartbeating through one of 9 s,
// must go on pacing itself for 2 s or its lease lapses.
func TestHeartbeatAnswersTheLeaseTTL(t *testing.T) {
	etcd := testetcd.Start(t)
	ctrlA, _, stopA := runMDS(t, map[string][]string{"etcd": {etcd.Endpoint}, "heartbeat-ttl-ms": {"2000"}, "http-listen": {""}})
	ctx := context.Background()
	if _, err := mdsClient(t, "default", ctrlA).Register(ctx, member(1)); err != nil {
		t.Fatal(err)
	}
	stopA()
	ctrlB, _, _ := runMDS(t, map[string][]string{"etcd": {etcd.Endpoint}, "heartbeat-ttl-ms": {"9000"}, "http-listen": {""}})
	rep, err := mdsClient(t, "default", ctrlB).Heartbeat(ctx, "node-1")
	if err != nil {
		t.Fatal(err)
	}
	if rep.HeartbeatTTLMS != 2000 {
		t.Fatalf("a heartbeat of a node with a 2 s lease answered a TTL of %d ms", rep.HeartbeatTTLMS)
	}
}

// A DEREGISTER removes only the registration it read: one the node made
// meanwhile (through another MDS, while this request ran late) stays.
func TestDeregisterSparesANewerRegistration(t *testing.T) {
	etcd := testetcd.Start(t)
	d, err := openEtcdDir([]string{etcd.Endpoint}, "/dfkv-test", 10*time.Second, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx := context.Background()
	if _, err := d.Register(ctx, "g", member(1), nil); err != nil {
		t.Fatal(err)
	}
	d.deregisterRead = func() {
		d.deregisterRead = nil
		if _, err := d.Register(ctx, "g", member(1), nil); err != nil {
			t.Error(err)
		}
	}
	if _, err := d.Deregister(ctx, "g", "node-1"); !errors.Is(err, ErrUnknownMember) {
		t.Fatalf("a DEREGISTER overtaken by a new registration: %v, want ErrUnknownMember", err)
	}
	if _, ms, err := d.Members(ctx, "g"); err != nil || len(ms) != 1 || ms[0].ID != "node-1" {
		t.Fatalf("members after a late DEREGISTER: %v, %v; want node-1 still registered", ms, err)
	}
}
