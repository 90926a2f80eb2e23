package mds

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/wire"
)

// In-process tests of the bbolt directory's expiry against heartbeats and
// registrations racing it, and of damaged files, each a bug a review
// demonstrated.

// TestBoltSweepSparesMemberHeartbeatingMeanwhile: the sweeper chose a
// lapsed member but its write came later (bbolt runs one writer at a
// time, so it may wait behind another); a heartbeat answered OK
// meanwhile, so the sweep must not drop the member. The sweep's two steps
// are run by hand, in that order, with the background sweeper stopped.
func TestBoltSweepSparesMemberHeartbeatingMeanwhile(t *testing.T) {
	clock := &manualClock{now: time.Unix(1_000_000, 0)}
	const ttl = 200 * time.Millisecond
	d := mustOpenBolt(t, filepath.Join(t.TempDir(), "mds.db"), ttl, clock)
	defer d.Close()
	stopSweeper(d)
	ctx := context.Background()
	if _, err := d.Register(ctx, "g", member(1), nil); err != nil {
		t.Fatal(err)
	}
	clock.advance(2 * ttl)
	chosen := d.lapsed(clock.Now())
	if _, ok := chosen["g"]["node-1"]; !ok {
		t.Fatalf("the sweep did not choose node-1 two TTLs after its registration: %v", chosen)
	}
	if _, err := d.Heartbeat(ctx, "g", "node-1"); err != nil {
		t.Fatalf("heartbeat: %v", err)
	}
	d.drop(chosen) // the sweep's write, after the heartbeat
	if _, ms, _ := d.Members(ctx, "g"); len(ms) != 1 {
		t.Fatalf("a member whose heartbeat was answered OK was dropped: %+v", ms)
	}
	// Chosen again with no heartbeat since, it goes.
	clock.advance(2 * ttl)
	d.drop(d.lapsed(clock.Now()))
	if _, ms, _ := d.Members(ctx, "g"); len(ms) != 0 {
		t.Fatalf("a member silent for two TTLs was kept: %+v", ms)
	}
}

// TestBoltHeartbeatWhileSweepDeletesIsRefused: a heartbeat that comes
// after the sweep chose to delete its member, but before the deletion
// commits, reads the member as still there; it used to be answered OK, so
// the node thought itself listed while no client routed to it until its
// next heartbeat (the simulation found this). It is now answered as for
// an unknown member, and the node registers again at once.
func TestBoltHeartbeatWhileSweepDeletesIsRefused(t *testing.T) {
	clock := &manualClock{now: time.Unix(1_000_000, 0)}
	const ttl = 200 * time.Millisecond
	d := mustOpenBolt(t, filepath.Join(t.TempDir(), "mds.db"), ttl, clock)
	defer d.Close()
	stopSweeper(d)
	ctx := context.Background()
	if _, err := d.Register(ctx, "g", member(1), nil); err != nil {
		t.Fatal(err)
	}
	clock.advance(2 * ttl)
	var during error
	d.hooks.decided = func() { _, during = d.Heartbeat(ctx, "g", "node-1") }
	d.drop(d.lapsed(clock.Now()))
	d.hooks.decided = nil
	if _, ms, _ := d.Members(ctx, "g"); len(ms) != 0 {
		t.Fatalf("the lapsed member was kept: %+v", ms)
	}
	if !errors.Is(during, ErrUnknownMember) {
		t.Fatalf("a heartbeat while the sweep deleted its member: %v, want ErrUnknownMember (the member is not listed)", during)
	}
	if _, err := d.Heartbeat(ctx, "g", "node-1"); !errors.Is(err, ErrUnknownMember) {
		t.Fatalf("a heartbeat after the deletion: %v, want ErrUnknownMember", err)
	}
	if _, err := d.Register(ctx, "g", member(1), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Heartbeat(ctx, "g", "node-1"); err != nil {
		t.Fatalf("a heartbeat after registering again: %v", err)
	}
}

// stopSweeper stops d's background sweeper, so a test runs the sweep's
// steps itself; d.Close still works.
func stopSweeper(d *boltDir) {
	close(d.stop)
	<-d.done
	d.stop, d.done = make(chan struct{}), make(chan struct{})
	close(d.done)
}

// TestBoltRegisterRacingDeregisterKeepsHeartbeatRecord: whatever order a
// registration and a deregistration of one member land in, a member that
// is listed has a heartbeat record, so it expires if its node dies; one
// without would stay in every client's ring for good.
func TestBoltRegisterRacingDeregisterKeepsHeartbeatRecord(t *testing.T) {
	d := mustOpenBolt(t, filepath.Join(t.TempDir(), "mds.db"), time.Hour, engine.SystemClock{})
	defer d.Close()
	ctx := context.Background()
	for i := range 500 {
		var wg sync.WaitGroup
		wg.Go(func() { _, _ = d.Register(ctx, "g", member(1), nil) })
		wg.Go(func() { _, _ = d.Deregister(ctx, "g", "node-1") })
		wg.Wait()
		_, ms, err := d.Members(ctx, "g")
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) == 1 && ms[0].LastHeartbeatUnixMS <= 0 {
			t.Fatalf("iteration %d: node-1 listed with no heartbeat record", i)
		}
	}
}

// TestBoltCorruptFileIsAnError: a damaged page makes bbolt panic on some
// pages; the MDS must refuse the file with an error naming it, never
// crash.
func TestBoltCorruptFileIsAnError(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.db")
	d := mustOpenBolt(t, good, time.Hour, engine.SystemClock{})
	for i := range 20 {
		if _, err := d.Register(context.Background(), "g", member(i), nil); err != nil {
			t.Fatal(err)
		}
	}
	d.Close()
	orig, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	const page = 4096
	for p := 2; p*page < len(orig); p++ {
		b := append([]byte(nil), orig...)
		for i := p * page; i < (p+1)*page; i++ {
			b[i] = byte(i*7 + p)
		}
		// A file of its own for each: bbolt can panic inside Open after
		// locking the file, and leaves it locked; a second Open of the
		// same file would then wait out the lock timeout and fail with
		// that (it names the file too), testing nothing.
		path := filepath.Join(dir, fmt.Sprintf("bad-page-%d.db", p))
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		d, err := openBoltDir(path, time.Hour, engine.SystemClock{}, slog.New(slog.DiscardHandler), boltHooks{})
		if err != nil {
			if !strings.Contains(err.Error(), path) || strings.Contains(err.Error(), "timeout") {
				t.Fatalf("page %d damaged: error %q does not name the file, or is the lock's timeout", p, err)
			}
			continue
		}
		d.Close()
	}
}

// TestControlConnectionBoundedAfterFirstRequest: a control connection that
// sends one whole request and then part of another is closed after the
// request deadline, like one that never sends a first request.
func TestControlConnectionBoundedAfterFirstRequest(t *testing.T) {
	ctrl, _, _ := runMDS(t, map[string][]string{"db": {filepath.Join(t.TempDir(), "m.db")}, "first-request-ms": {"200"}})
	mc := mdsClient(t, "default", ctrl)
	if _, _, _, err := mc.Members(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", ctrl)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := []byte(`{"group":"default"}`)
	req := append(wire.AppendMDSRequest(nil, wire.OpMDSMembers, 0, len(body)), body...)
	if _, err := c.Write(req); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var pre [wire.ResponsePrefixLen]byte
	if _, err := io.ReadFull(c, pre[:]); err != nil {
		t.Fatalf("first reply: %v", err)
	}
	if _, err := c.Write(req[:5]); err != nil {
		t.Fatal(err)
	}
	// The rest of the first reply, then EOF once the deadline cuts the
	// half-sent second request.
	if _, err := io.Copy(io.Discard, c); err != nil {
		t.Fatalf("connection not closed after a half-sent second request: %v", err)
	}
}

// TestUnknownGroupsDoNotGrowReplyCache: MEMBERS of groups nobody
// registered in are answered (empty, epoch 0) without a cache entry each.
func TestUnknownGroupsDoNotGrowReplyCache(t *testing.T) {
	d := mustOpenBolt(t, filepath.Join(t.TempDir(), "mds.db"), time.Hour, engine.SystemClock{})
	defer d.Close()
	cs := &controlServer{dir: d, log: slog.New(slog.DiscardHandler), ttl: time.Hour}
	for i := range 100 {
		st, epoch, _ := cs.do(context.Background(), wire.OpMDSMembers, 0, []byte(fmt.Sprintf(`{"group":"nobody-%d"}`, i)))
		if st != wire.StatusOK || epoch != 0 {
			t.Fatalf("MEMBERS of an unknown group: %v epoch %d", st, epoch)
		}
	}
	cs.cacheMu.Lock()
	defer cs.cacheMu.Unlock()
	if len(cs.replies) != 0 {
		t.Fatalf("%d cache entries for groups nobody registered in", len(cs.replies))
	}
}

// mustOpenBolt opens a bbolt directory at path with a silent log.
func mustOpenBolt(t *testing.T, path string, ttl time.Duration, clock engine.Clock) *boltDir {
	t.Helper()
	d, err := openBoltDir(path, ttl, clock, slog.New(slog.DiscardHandler), boltHooks{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}
