package mds

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/dfkv/dfkv/config"
	"github.com/dfkv/dfkv/engine"
	"github.com/dfkv/dfkv/roles/internal/heaptest"
	"github.com/dfkv/dfkv/roles/internal/testetcd"
	"github.com/dfkv/dfkv/wire"
	"github.com/dfkv/dfkv/wire/client"
)

func member(i int) wire.MemberInfo {
	return wire.MemberInfo{ID: fmt.Sprintf("node-%d", i), Addr: fmt.Sprintf("127.0.0.1:%d", 7600+i), Weight: 1, CapacityBytes: 1 << 30}
}

// runMDS runs an MDS in-process and returns its control and HTTP
// addresses and a stop function.
func runMDS(t *testing.T, flags map[string][]string) (ctrl, httpAddr string, stop func()) {
	return runMDSB(t, flags)
}

func runMDSB(t testing.TB, flags map[string][]string) (ctrl, httpAddr string, stop func()) {
	t.Helper()
	cfg, _, err := config.LoadFrom("mds", "", nil, flags)
	if err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	hln, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ready := make(chan struct{})
	go func() {
		done <- Run(ctx, cfg, Deps{Listener: ln, HTTPListener: hln, Logger: slog.New(slog.DiscardHandler), Ready: func() { close(ready) }})
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("mds did not start: %v", err)
	}
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Errorf("mds: %v", err)
			}
		}
	}
	t.Cleanup(stop)
	return ln.Addr().String(), hln.Addr().String(), stop
}

func mdsClientB(t testing.TB, addr string) *client.MDSClient { return mdsClient(t, "default", addr) }

func mdsClient(t testing.TB, group string, addrs ...string) *client.MDSClient {
	t.Helper()
	c, err := client.NewMDSClient(addrs, group, nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestBoltDirectory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mds.db")
	d, err := openBoltDir(path, time.Hour, engine.SystemClock{}, slog.New(slog.DiscardHandler), boltHooks{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	e1, err := d.Register(ctx, "g", member(1), nil)
	if err != nil {
		t.Fatal(err)
	}
	e2, _ := d.Register(ctx, "g", member(2), nil)
	e2again, _ := d.Register(ctx, "g", member(2), nil) // same again: no change
	if !(e1 < e2 && e2 == e2again) {
		t.Fatalf("epochs %d %d %d: want growth on change only", e1, e2, e2again)
	}
	if _, err := d.Heartbeat(ctx, "g", "node-9"); !errors.Is(err, ErrUnknownMember) {
		t.Fatalf("heartbeat of an unknown member: %v", err)
	}
	if _, err := d.Heartbeat(ctx, "other", "node-1"); !errors.Is(err, ErrUnknownMember) {
		t.Fatal("groups are not separate")
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	// The directory survives an MDS restart.
	d, err = openBoltDir(path, time.Hour, engine.SystemClock{}, slog.New(slog.DiscardHandler), boltHooks{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	epoch, ms, err := d.Members(ctx, "g")
	if err != nil || epoch != e2 || len(ms) != 2 || ms[0].ID != "node-1" || ms[1].Addr != member(2).Addr {
		t.Fatalf("after restart: epoch %d members %+v err %v", epoch, ms, err)
	}
	if _, err := d.Heartbeat(ctx, "g", "node-1"); err != nil {
		t.Fatalf("heartbeat after restart: %v", err)
	}
	e3, err := d.Deregister(ctx, "g", "node-1")
	if err != nil || e3 <= e2 {
		t.Fatalf("deregister: %d %v", e3, err)
	}
	if _, err := d.Deregister(ctx, "g", "node-1"); !errors.Is(err, ErrUnknownMember) {
		t.Fatalf("second deregister: %v", err)
	}
}

// manualClock is a clock a test moves by hand, so a heartbeat TTL is
// judged on the test's time, not on how fast a loaded machine runs it.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func TestBoltHeartbeatExpiry(t *testing.T) {
	var mu sync.Mutex
	var expired int
	clock := &manualClock{now: time.Unix(1_000_000, 0)}
	const ttl = 300 * time.Millisecond
	d, err := openBoltDir(filepath.Join(t.TempDir(), "mds.db"), ttl, clock, slog.New(slog.DiscardHandler), boltHooks{expired: func(n int) {
		mu.Lock()
		expired += n
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	d.Register(ctx, "g", member(1), nil)
	e0, _ := d.Register(ctx, "g", member(2), nil)
	// node-1 keeps heartbeating every 50 ms of the clock, node-2 falls
	// silent; the sweeper (on a real ticker) drops node-2 once the clock
	// has passed its TTL.
	deadline := time.Now().Add(10 * time.Second)
	for {
		clock.advance(50 * time.Millisecond)
		if _, err := d.Heartbeat(ctx, "g", "node-1"); err != nil {
			t.Fatal(err)
		}
		epoch, ms, _ := d.Members(ctx, "g")
		if len(ms) == 1 {
			if ms[0].ID != "node-1" || epoch <= e0 {
				t.Fatalf("wrong survivor or epoch: %+v %d", ms, epoch)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("silent member never expired")
		}
		if clock.Now().Sub(time.Unix(1_000_000, 0)) > 2*ttl {
			time.Sleep(20 * time.Millisecond) // past the TTL: give the sweeper a tick
		}
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if expired != 1 {
		t.Fatalf("expiry counter %d", expired)
	}
}

func TestBoltRefusesForeignFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mds.db")
	d, _ := openBoltDir(path, time.Hour, engine.SystemClock{}, slog.New(slog.DiscardHandler), boltHooks{})
	d.db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("stranger")); return err })
	d.Close()
	if _, err := openBoltDir(path, time.Hour, engine.SystemClock{}, slog.New(slog.DiscardHandler), boltHooks{}); err == nil || !strings.Contains(err.Error(), "not a dfkv directory") {
		t.Fatalf("foreign bucket accepted: %v", err)
	}
}

// TestControlProtocol drives the MDS over TCP with the client's MDSClient.
func TestControlProtocol(t *testing.T) {
	ctrl, httpAddr, _ := runMDS(t, map[string][]string{"db": {filepath.Join(t.TempDir(), "m.db")}})
	mc := mdsClient(t, "default", ctrl)
	ctx := context.Background()
	rep, err := mc.Register(ctx, member(1))
	if err != nil || rep.HeartbeatTTLMS != 10000 {
		t.Fatalf("register: %+v %v", rep, err)
	}
	epoch, ms, changed, err := mc.Members(ctx, 0)
	if err != nil || !changed || len(ms) != 1 || epoch != rep.Epoch {
		t.Fatalf("members: %d %+v %v %v", epoch, ms, changed, err)
	}
	if _, _, changed, err := mc.Members(ctx, epoch); err != nil || changed {
		t.Fatalf("members at the known epoch: changed=%v %v", changed, err)
	}
	// The heartbeat's answer carries the TTL in force, so nodes registered
	// under another one (an MDS restarted with a new TTL) pace themselves.
	if hb, err := mc.Heartbeat(ctx, "node-1"); err != nil || hb.HeartbeatTTLMS != 10000 || hb.Epoch != epoch {
		t.Fatalf("heartbeat: %+v %v; want the 10000 ms TTL at epoch %d", hb, err, epoch)
	}
	if _, err := mc.Heartbeat(ctx, "ghost"); wire.StatusOf(err) != wire.StatusNotFound {
		t.Fatalf("heartbeat of a ghost: %v", err)
	}
	// Bad registrations are refused with a reason.
	bad := member(2)
	bad.Addr = "0.0.0.0:7600"
	if _, err := mc.Register(ctx, bad); wire.StatusOf(err) != wire.StatusInvalid || !strings.Contains(err.Error(), "advertise_addr") {
		t.Fatalf("unspecified address: %v", err)
	}
	bad = member(2)
	bad.Addr = strings.Repeat("a", 60<<10) + ".example:7600" // would push the MEMBERS reply past its cap
	if _, err := mc.Register(ctx, bad); wire.StatusOf(err) != wire.StatusInvalid || !strings.Contains(err.Error(), "253") {
		t.Fatalf("a 60 KiB address: %v", err)
	}
	for _, addr := range []string{"10.0.0.1:", "10.0.0.1:0", "10.0.0.1:65536", "10.0.0.1:-5", "10.0.0.1:x y", "10.0.0.1", ":7600"} {
		bad = member(2)
		bad.Addr = addr
		if _, err := mc.Register(ctx, bad); wire.StatusOf(err) != wire.StatusInvalid || !strings.Contains(err.Error(), "host:port") {
			t.Fatalf("address %q: %v", addr, err)
		}
	}
	bad = member(2)
	bad.ID = "has space"
	if _, err := mc.Register(ctx, bad); wire.StatusOf(err) != wire.StatusInvalid {
		t.Fatalf("bad id: %v", err)
	}
	if _, err := client.NewMDSClient([]string{ctrl}, "bad group!", nil, time.Second); wire.StatusOf(err) != wire.StatusInvalid {
		t.Fatalf("bad group accepted at open: %v", err)
	}
	// The member list as JSON for humans.
	resp, err := http.Get("http://" + httpAddr + "/members")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Epoch   uint64
		Members []wire.MemberInfo
	}
	json.NewDecoder(resp.Body).Decode(&doc)
	resp.Body.Close()
	if doc.Epoch != epoch || len(doc.Members) != 1 || doc.Members[0].ID != "node-1" {
		t.Fatalf("/members: %+v", doc)
	}
	if err := mc.Deregister(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	if _, ms, _, _ := mc.Members(ctx, 0); len(ms) != 0 {
		t.Fatalf("after deregister: %+v", ms)
	}
}

func TestControlProtocolRefusesStrangers(t *testing.T) {
	ctrl, _, _ := runMDS(t, map[string][]string{"db": {filepath.Join(t.TempDir(), "m.db")}, "first-request-ms": {"1000"}})
	// A data-plane frame (epoch 6) on the MDS port. (The deadline is long
	// enough for the connections that must get an answer to send in time
	// on a loaded machine; only the drip feeder below waits it out.)
	c, err := net.Dial("tcp", ctrl)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	c.Write(wire.AppendRequest(nil, &wire.RequestHeader{Op: wire.OpPing}))
	var hb [wire.ResponsePrefixLen]byte
	if _, err := io.ReadFull(c, hb[:]); err != nil {
		t.Fatal(err)
	}
	h, err := wire.DecodeMDSResponse(hb[:])
	if err != nil || h.Status != wire.StatusEpochMismatch {
		t.Fatalf("epoch 6 on the MDS: %+v %v", h, err)
	}
	io.CopyN(io.Discard, c, int64(h.BodyLen))
	if _, err := c.Read(hb[:1]); err == nil {
		t.Fatal("connection still open after an epoch mismatch")
	}
	// A drip feeder whose first prefix stops part-way is refused as soon
	// as it goes quiet, and closed.
	d, _ := net.Dial("tcp", ctrl)
	defer d.Close()
	d.SetDeadline(time.Now().Add(10 * time.Second))
	d.Write(wire.AppendMDSRequest(nil, wire.OpMDSMembers, 0, 10)[:20])
	if _, err := io.ReadFull(d, hb[:]); err != nil {
		t.Fatalf("drip feeder not answered: %v", err)
	}
	if h, err := wire.DecodeMDSResponse(hb[:]); err != nil || h.Status != wire.StatusEpochMismatch {
		t.Fatalf("drip feeder: %+v %v", h, err)
	} else {
		io.CopyN(io.Discard, d, int64(h.BodyLen))
	}
	if _, err := d.Read(hb[:1]); err == nil {
		t.Fatal("drip feeder not closed")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("drip feeder still connected after the deadline")
	}
	// The data-plane client fails fast against an MDS address too.
	cl, err := client.Open(client.Options{Namespace: []byte("n"), Members: []string{ctrl}, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.Put(context.Background(), []byte("k"), []byte("v")); !errors.Is(err, wire.StatusEpochMismatch) {
		t.Fatalf("data client on the MDS port: %v", err)
	}
}

// TestMembersReplyCap: a member list too large for one reply is refused
// with TOO_LARGE, never truncated. The cap is lowered for the test so tens
// of members reach it (at the real 1 MiB it takes thousands).
func TestMembersReplyCap(t *testing.T) {
	defer func(c int) { membersReplyCap = c }(membersReplyCap)
	membersReplyCap = 4 << 10
	ctrl, _, _ := runMDS(t, map[string][]string{"db": {filepath.Join(t.TempDir(), "m.db")}})
	mc := mdsClient(t, "default", ctrl)
	ctx := context.Background()
	n := 0
	for total := 0; total <= membersReplyCap; n++ {
		m := member(n)
		m.ID = fmt.Sprintf("node-%03d-%s", n, strings.Repeat("x", 100))
		if _, err := mc.Register(ctx, m); err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(m)
		total += len(b)
	}
	_, ms, _, err := mc.Members(ctx, 0)
	if wire.StatusOf(err) != wire.StatusTooLarge || ms != nil || !strings.Contains(err.Error(), "reply cap") {
		t.Fatalf("oversized member list of %d members: got %d members, %v", n, len(ms), err)
	}
	// One member fewer fits again.
	if err := mc.Deregister(ctx, fmt.Sprintf("node-%03d-%s", n-1, strings.Repeat("x", 100))); err != nil {
		t.Fatal(err)
	}
	membersReplyCap = 1 << 20
	if _, ms, _, err := mc.Members(ctx, 0); err != nil || len(ms) != n-1 {
		t.Fatalf("under the cap: %d members, %v", len(ms), err)
	}
}

func TestEtcdDirectorySharedByTwoMDS(t *testing.T) {
	etcd := testetcd.Start(t)
	flags := map[string][]string{"etcd": {etcd.Endpoint}, "heartbeat-ttl-ms": {"2000"}, "probe-cache-ms": {"0"}}
	ctrlA, _, _ := runMDS(t, flags)
	ctrlB, httpB, _ := runMDS(t, flags)
	a, b := mdsClient(t, "default", ctrlA), mdsClient(t, "default", ctrlB)
	ctx := context.Background()
	if _, err := a.Register(ctx, member(1)); err != nil {
		t.Fatal(err)
	}
	rep, err := a.Register(ctx, member(2))
	if err != nil {
		t.Fatal(err)
	}
	epoch, ms, _, err := b.Members(ctx, 0)
	if err != nil || len(ms) != 2 || epoch < rep.Epoch {
		t.Fatalf("MDS B sees %d members at epoch %d (A said %d): %v", len(ms), epoch, rep.Epoch, err)
	}
	// Heartbeats through B renew leases granted through A.
	stopBeat := make(chan struct{})
	beatDone := make(chan struct{})
	go func() {
		defer close(beatDone)
		for {
			select {
			case <-stopBeat:
				return
			case <-time.After(300 * time.Millisecond): // a node's pace against a real etcd lease: real time
				b.Heartbeat(ctx, "node-1")
			}
		}
	}()
	// node-2 falls silent and its lease lapses within TTL (+ etcd's
	// lease granularity); node-1 stays.
	start := time.Now()
	for {
		e, ms, _, err := a.Members(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) == 1 {
			if ms[0].ID != "node-1" || e <= epoch {
				t.Fatalf("survivor %+v at epoch %d (was %d)", ms, e, epoch)
			}
			t.Logf("silent member dropped %v after its last registration (TTL 2s)", time.Since(start).Round(10*time.Millisecond))
			break
		}
		if time.Since(start) > 15*time.Second {
			t.Fatal("lapsed lease never dropped the member")
		}
		time.Sleep(100 * time.Millisecond) // polling: etcd expires the lease on its own clock
	}
	// Neither MDS knows when node-1 last heartbeated (B serves its
	// heartbeats now, another MDS could tomorrow): both say its lease is
	// live, and give no time, not even the registration's (over 2 s ago
	// by now, through A).
	for name, c := range map[string]*client.MDSClient{"A": a, "B": b} {
		if _, ms, _, err := c.Members(ctx, 0); err != nil || len(ms) != 1 || !ms[0].LeaseLive || ms[0].LastHeartbeatUnixMS != 0 {
			t.Fatalf("%s's member list while B serves node-1's heartbeats: %+v %v; want the lease live and no heartbeat time", name, ms, err)
		}
	}
	lastEpoch, _, _, err := b.Members(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	close(stopBeat)
	<-beatDone
	if err := b.Deregister(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	if _, ms, _, _ := a.Members(ctx, 0); len(ms) != 0 {
		t.Fatalf("after deregister through B, A sees %+v", ms)
	}
	// Readiness follows etcd: down when it stops, back when it returns.
	ready := func() int {
		resp, err := http.Get("http://" + httpB + "/readyz")
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := ready(); got != 200 {
		t.Fatalf("readyz with etcd up: %d", got)
	}
	etcd.Stop()
	if got := ready(); got != http.StatusServiceUnavailable {
		t.Fatalf("readyz with etcd down: %d", got)
	}
	// MEMBERS with etcd down: B answers with the last list it served
	// (node-1 alone, though it has left since: B was not asked again), so
	// a client starting now can open; readiness says the backend is down.
	if e, ms, _, err := b.Members(ctx, 0); err != nil || e != lastEpoch || len(ms) != 1 {
		t.Fatalf("members with etcd down: %d members at epoch %d (want B's last list, 1 at %d): %v", len(ms), e, lastEpoch, err)
	}
	etcd.Restart(t)
	deadline := time.Now().Add(20 * time.Second)
	for ready() != 200 {
		if time.Now().After(deadline) {
			t.Fatal("readyz did not recover after etcd came back")
		}
		time.Sleep(100 * time.Millisecond) // polling: etcd and the MDS's client reconnect in real time
	}
}

// TestProbeDebounce: with a probe cache, /readyz does not reach the
// backend on every request.
func TestProbeDebounce(t *testing.T) {
	d := &countingDir{}
	p := &probeCache{dir: d, ttl: time.Hour}
	for i := 0; i < 10; i++ {
		p.check(context.Background())
	}
	if d.probes != 1 {
		t.Fatalf("%d probes with a cache, want 1", d.probes)
	}
	p = &probeCache{dir: d, ttl: 0}
	for i := 0; i < 3; i++ {
		p.check(context.Background())
	}
	if d.probes != 4 {
		t.Fatalf("%d probes without a cache, want 4", d.probes)
	}
}

// TestProbeSharedWhileOut: callers arriving while a probe is out (etcd
// slow or gone, each probe up to its timeout) share it instead of
// queueing one probe each behind it, and a caller whose deadline passes
// stops waiting without cancelling the probe for the others.
func TestProbeSharedWhileOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := &stuckProbeDir{release: make(chan struct{})}
		p := &probeCache{dir: d, ttl: 0}
		errs := make(chan error, 8)
		for range 8 {
			go func() { errs <- p.check(context.Background()) }()
		}
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := p.check(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a caller whose deadline passed: %v, want it to stop waiting", err)
		}
		if p.down() {
			t.Fatal("down before any probe finished")
		}
		d.err = errors.New("etcd gone")
		close(d.release)
		for range 8 {
			if err := <-errs; err == nil || err.Error() != "etcd gone" {
				t.Fatalf("a caller sharing the probe got %v", err)
			}
		}
		if d.probes.Load() != 1 {
			t.Fatalf("%d probes for 9 callers arriving while one was out, want 1", d.probes.Load())
		}
		if !p.down() {
			t.Fatal("down() false after the shared probe failed")
		}
	})
}

// stuckProbeDir's probe waits until release is closed, then answers err.
type stuckProbeDir struct {
	Directory
	release chan struct{}
	err     error
	probes  atomic.Int32
}

func (d *stuckProbeDir) Probe(context.Context) error {
	d.probes.Add(1)
	<-d.release
	return d.err
}

type countingDir struct {
	Directory
	probes int
}

func (d *countingDir) Probe(context.Context) error { d.probes++; return nil }

// TestAnnouncedBodiesCostNothingUntilSent: a control request's token is
// inside its body, so the MDS reads the body before any check; a header
// announcing the largest body and sending none must not make it set
// aside that much memory per connection (it did: 400 such connections
// held 25 MiB until their first-request deadline).
func TestAnnouncedBodiesCostNothingUntilSent(t *testing.T) {
	ctrl, _, _ := runMDS(t, map[string][]string{"db": {filepath.Join(t.TempDir(), "m.db")}})
	const conns = 400
	before := heaptest.Live()
	for range conns {
		c, err := net.Dial("tcp", ctrl)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write(wire.AppendMDSRequest(nil, wire.OpMDSMembers, 0, wire.MaxMDSRequest)); err != nil {
			t.Fatal(err)
		}
	}
	// Watch for a while: the MDS reads the headers as it gets to them.
	limit := int64(conns * wire.MaxMDSRequest / 4)
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if grew := heaptest.Live() - before; grew > limit {
			t.Fatalf("%d connections announcing %d-byte bodies grew the heap by %d KiB (limit %d KiB)",
				conns, wire.MaxMDSRequest, grew>>10, limit>>10)
		}
	}
}

// TestShortFrameOfAnotherEpochRefusedAtOnce: a control frame of an older
// generation, shorter than this prefix (42 bytes), is answered on its
// first byte, not after the first-request deadline (60 s here) its
// missing bytes would run into.
func TestShortFrameOfAnotherEpochRefusedAtOnce(t *testing.T) {
	ctrl, _, _ := runMDS(t, map[string][]string{"db": {filepath.Join(t.TempDir(), "m.db")}, "first-request-ms": {"60000"}})
	c, err := net.Dial("tcp", ctrl)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	legacy := make([]byte, 42)
	legacy[0] = 1
	c.Write(legacy)
	start := time.Now()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	var hb [wire.ResponsePrefixLen]byte
	if _, err := io.ReadFull(c, hb[:]); err != nil {
		t.Fatalf("no answer to a 42-byte frame of epoch 1: %v", err)
	}
	h, err := wire.DecodeMDSResponse(hb[:])
	msg := make([]byte, h.BodyLen)
	io.ReadFull(c, msg)
	t.Logf("refused after %s: %s", time.Since(start).Round(time.Microsecond), msg)
	if err != nil || h.Status != wire.StatusEpochMismatch || !strings.Contains(string(msg), "epoch 1") {
		t.Fatalf("a 42-byte frame of epoch 1 on the MDS: %+v %v %q", h, err, msg)
	}
}

// TestShortFirstPrefixOfThisEpochRefusedAtOnce: a 42-byte frame that
// starts with the MDS's epoch byte is answered once it has gone quiet
// part-way through the prefix, not after the first-request deadline.
func TestShortFirstPrefixOfThisEpochRefusedAtOnce(t *testing.T) {
	ctrl, _, _ := runMDS(t, map[string][]string{"db-path": {filepath.Join(t.TempDir(), "m.db")}, "first-request-ms": {"60000"}})
	c, err := net.Dial("tcp", ctrl)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	legacy := wire.AppendMDSRequest(nil, wire.OpMDSMembers, 0, 20)[:42]
	if _, err := c.Write(legacy); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	var hb [wire.ResponsePrefixLen]byte
	if _, err := io.ReadFull(c, hb[:]); err != nil {
		t.Fatalf("no answer to a 42-byte frame of epoch 8: %v", err)
	}
	h, err := wire.DecodeMDSResponse(hb[:])
	msg := make([]byte, h.BodyLen)
	_, _ = io.ReadFull(c, msg)
	t.Logf("refused after %s: %s", time.Since(start).Round(time.Microsecond), msg)
	if err != nil || h.Status != wire.StatusEpochMismatch || !strings.Contains(string(msg), "after 42 bytes") {
		t.Fatalf("a 42-byte frame of epoch 8 on the MDS: %+v %v %q", h, err, msg)
	}
}

// TestBoltAdmissionSkipsAnUnreadableRecord: a member record bbolt holds
// but the MDS cannot decode does not block registrations to its group:
// the admission check skips it (as the etcd directory skips such records)
// and still counts the readable members.
func TestBoltAdmissionSkipsAnUnreadableRecord(t *testing.T) {
	d, err := openBoltDir(filepath.Join(t.TempDir(), "mds.db"), time.Hour, engine.SystemClock{}, slog.New(slog.DiscardHandler), boltHooks{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx := context.Background()
	if _, err := d.Register(ctx, "g", member(1), nil); err != nil {
		t.Fatal(err)
	}
	if err := d.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketName("g")).Put([]byte("m/broken"), []byte("{not json"))
	}); err != nil {
		t.Fatal(err)
	}
	var seen []string
	admit := func(ms []wire.MemberInfo) error {
		for _, m := range ms {
			seen = append(seen, m.ID)
		}
		return nil
	}
	if _, err := d.Register(ctx, "g", member(2), admit); err != nil {
		t.Fatalf("REGISTER beside an unreadable record: %v", err)
	}
	if len(seen) != 1 || seen[0] != "node-1" {
		t.Fatalf("the admission saw members %v, want [node-1]", seen)
	}
}
