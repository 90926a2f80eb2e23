package client

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dfkv/dfkv/wire"
)

// fakeNode accepts connections and runs handle on each; it lets client
// tests script a node's misbehaviour without a real server.
func fakeNode(t *testing.T, handle func(c net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); handle(c) }()
		}
	}()
	return ln.Addr().String()
}

// readPrefix reads and decodes one request prefix, leaving its body.
func readPrefix(c net.Conn) (wire.RequestHeader, error) {
	var b [wire.RequestPrefixLen]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return wire.RequestHeader{}, err
	}
	return wire.DecodeRequest(b[:], wire.Limits{MaxBlockBytes: 1 << 30, MaxBatchItems: 1 << 16})
}

// readRequest reads one request prefix and its body.
func readRequest(c net.Conn) (wire.RequestHeader, error) {
	h, err := readPrefix(c)
	if err != nil {
		return h, err
	}
	_, err = io.CopyN(io.Discard, c, int64(h.BodyLen))
	return h, err
}

func reply(c net.Conn, h wire.ResponseHeader, body []byte) {
	h.BodyLen = uint64(len(body))
	_, _ = c.Write(append(wire.AppendResponse(nil, &h), body...))
}

func open(t *testing.T, members ...string) *Client {
	t.Helper()
	// The fake nodes speak TCP only; shared memory is tested against
	// real nodes (roles/server).
	c, err := Open(Options{Namespace: []byte("ns"), Members: members, Timeout: 5 * time.Second, DialTimeout: time.Second, SharedMemory: ShmOff})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestOpenValidates(t *testing.T) {
	if _, err := Open(Options{Members: []string{"127.0.0.1:1"}}); wire.StatusOf(err) != wire.StatusInvalid {
		t.Fatalf("empty namespace: %v", err)
	}
	if _, err := Open(Options{Namespace: []byte("n")}); wire.StatusOf(err) != wire.StatusInvalid {
		t.Fatalf("no members: %v", err)
	}
	if _, err := Open(Options{Namespace: []byte("n"), Members: []string{"nohostport"}}); wire.StatusOf(err) != wire.StatusInvalid {
		t.Fatalf("bad member: %v", err)
	}
}

func TestBadInputRefusedLocally(t *testing.T) {
	var conns atomic.Int32
	addr := fakeNode(t, func(c net.Conn) { conns.Add(1) })
	cl := open(t, addr)
	ctx := context.Background()
	f := func(name string, err error, want wire.Status) {
		t.Helper()
		if got := wire.StatusOf(err); got != want {
			t.Errorf("%s: got %v, want %s", name, err, want)
		}
	}
	f("empty key put", cl.Put(ctx, nil, []byte("v")), wire.StatusInvalid)
	f("zero-byte value", cl.Put(ctx, []byte("k"), []byte{}), wire.StatusInvalid)
	f("oversized value", cl.Put(ctx, []byte("k"), make([]byte, 64<<20+1)), wire.StatusTooLarge)
	_, err := cl.GetAuto(ctx, []byte{})
	f("empty key get", err, wire.StatusInvalid)
	_, _, err = cl.Get(ctx, []byte("k"), nil)
	f("get into nil buffer", err, wire.StatusInvalid)
	errs := cl.PutBatch(ctx, [][]byte{[]byte("a")}, nil)
	f("batch length mismatch", errs[0], wire.StatusInvalid)
	errs = cl.PutBatch(ctx, [][]byte{[]byte("a"), nil}, [][]byte{nil, []byte("x")})
	f("batch zero value", errs[0], wire.StatusInvalid)
	f("batch empty key", errs[1], wire.StatusInvalid)
	if conns.Load() != 0 {
		t.Fatalf("bad input reached the node (%d connections)", conns.Load())
	}
}

// countingDialer counts dial attempts.
type countingDialer struct {
	net.Dialer
	n atomic.Int32
}

func (d *countingDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	d.n.Add(1)
	return d.Dialer.DialContext(ctx, network, addr)
}

// TestDeadPeerReadsMissWritesFail: reads of an unreachable node are
// misses, writes are UNAVAILABLE, and inside the back-off window no call
// dials at all.
func TestDeadPeerReadsMissWritesFail(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close() // nothing listens here now
	d := &countingDialer{}
	cl, err := Open(Options{Namespace: []byte("ns"), Members: []string{addr}, Dialer: d, Timeout: 5 * time.Second, SharedMemory: ShmOff})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	_, err = cl.Exist(ctx, []byte("k"))
	if wire.StatusOf(err) != wire.StatusNotFound || !errors.Is(err, ErrPeerDown) || !errors.Is(err, wire.StatusUnavailable) {
		t.Fatalf("exist on a dead node: %v, want a miss wrapping ErrPeerDown and UNAVAILABLE", err)
	}
	if d.n.Load() != 1 {
		t.Fatalf("%d dials, want 1", d.n.Load())
	}
	// Inside the back-off: answered without dialing.
	if err := cl.Put(ctx, []byte("k"), []byte("v")); wire.StatusOf(err) != wire.StatusUnavailable || !errors.Is(err, ErrPeerDown) {
		t.Fatalf("put on a dead node: %v, want UNAVAILABLE", err)
	}
	if _, err := cl.GetAuto(ctx, []byte("k")); wire.StatusOf(err) != wire.StatusNotFound {
		t.Fatalf("get on a dead node: %v, want a miss", err)
	}
	res := cl.ExistBatch(ctx, [][]byte{[]byte("a"), []byte("b")})
	for i, r := range res {
		if wire.StatusOf(r.Err) != wire.StatusNotFound {
			t.Fatalf("batch item %d: %v", i, r.Err)
		}
	}
	if n, err := cl.ExistPrefix(ctx, [][]byte{[]byte("a")}); n != 0 || err != nil {
		t.Fatalf("prefix on a dead node: %d %v, want 0 and no error", n, err)
	}
	if d.n.Load() != 1 {
		t.Fatalf("%d dials inside the back-off window, want 1", d.n.Load())
	}
}

// TestPeerComesBack: after the back-off the node is tried again, and a
// success clears its history.
func TestPeerComesBack(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	cl := open(t, addr)
	ctx := context.Background()
	if err := cl.Put(ctx, []byte("k"), []byte("v")); !errors.Is(err, ErrPeerDown) {
		t.Fatalf("first put: %v", err)
	}
	ln2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("port %s taken by someone else meanwhile: %v", addr, err)
	}
	go func() {
		c, err := ln2.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		for {
			if _, err := readRequest(c); err != nil {
				return
			}
			reply(c, wire.ResponseHeader{Status: wire.StatusOK}, nil)
		}
	}()
	defer ln2.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := cl.Put(ctx, []byte("k"), []byte("v"))
		if err == nil {
			break
		}
		if !errors.Is(err, ErrPeerDown) || time.Now().After(deadline) {
			t.Fatalf("node never came back: %v", err)
		}
		time.Sleep(20 * time.Millisecond) // polling: calls fail fast until the breaker's window runs out
	}
}

func TestSilentNodeTimesOut(t *testing.T) {
	addr := fakeNode(t, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
	cl := open(t, addr)
	// Long enough for the dial on a loaded machine: a slow dial ends as
	// UNAVAILABLE, not the TIMEOUT of a node that took the request.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := cl.Put(ctx, []byte("k"), []byte("v"))
	if wire.StatusOf(err) != wire.StatusTimeout || !errors.Is(err, ErrPeerDown) {
		t.Fatalf("put: got %v, want TIMEOUT", err)
	}
	// A read of the same (now backed-off) node is a miss at once.
	_, err = cl.Exist(context.Background(), []byte("k"))
	if wire.StatusOf(err) != wire.StatusNotFound {
		t.Fatalf("exist: got %v, want a miss", err)
	}
}

// TestStalePooledConnectionRetried: a node that closes every connection
// after one answer (as across a restart) costs the caller nothing.
func TestStalePooledConnectionRetried(t *testing.T) {
	var served atomic.Int32
	addr := fakeNode(t, func(c net.Conn) {
		if _, err := readRequest(c); err != nil {
			return
		}
		served.Add(1)
		reply(c, wire.ResponseHeader{Status: wire.StatusOK, Stored: 3}, nil)
	})
	cl := open(t, addr)
	for i := 0; i < 3; i++ {
		if n, err := cl.Exist(context.Background(), []byte("k")); err != nil || n != 3 {
			t.Fatalf("call %d: %d %v", i, n, err)
		}
	}
	if served.Load() != 3 {
		t.Fatalf("served %d", served.Load())
	}
}

// TestRestartedNodeWithSeveralPooledConnections: a node that restarted
// closed every idle connection a client held to it; the first call after
// it still succeeds (it does not retry on another stale one).
func TestRestartedNodeWithSeveralPooledConnections(t *testing.T) {
	const pooled = 3
	var accepted atomic.Int32
	var arrived sync.WaitGroup
	arrived.Add(pooled)
	restart := make(chan struct{})
	addr := fakeNode(t, func(c net.Conn) {
		old := accepted.Add(1) <= pooled
		for {
			if _, err := readRequest(c); err != nil {
				return
			}
			if old {
				// Hold the first calls until all are in, so the client
				// pools one connection per call; then close them all.
				arrived.Done()
				arrived.Wait()
				reply(c, wire.ResponseHeader{Status: wire.StatusOK, Stored: 3}, nil)
				<-restart
				return
			}
			reply(c, wire.ResponseHeader{Status: wire.StatusOK, Stored: 3}, nil)
		}
	})
	cl := open(t, addr)
	var calls sync.WaitGroup
	for i := 0; i < pooled; i++ {
		calls.Go(func() {
			if _, err := cl.Exist(context.Background(), []byte("k")); err != nil {
				t.Errorf("call before the restart: %v", err)
			}
		})
	}
	calls.Wait()
	close(restart)
	time.Sleep(50 * time.Millisecond) // the node's FINs arrive
	if n, err := cl.Exist(context.Background(), []byte("k")); err != nil || n != 3 {
		t.Fatalf("first call after the restart: %d %v", n, err)
	}
	if got := accepted.Load(); got != pooled+1 {
		t.Fatalf("%d connections accepted, want %d: the call after the restart should dial once", got, pooled+1)
	}
}

func TestForeignEpochResponse(t *testing.T) {
	addr := fakeNode(t, func(c net.Conn) {
		if _, err := readRequest(c); err != nil {
			return
		}
		b := wire.AppendResponse(nil, &wire.ResponseHeader{Status: wire.StatusOK})
		b[0] = 5
		_, _ = c.Write(b)
	})
	cl := open(t, addr)
	_, err := cl.Exist(context.Background(), []byte("k"))
	if !errors.Is(err, wire.StatusEpochMismatch) {
		t.Fatalf("got %v, want EPOCH_MISMATCH", err)
	}
}

func TestStatusMessageSurfaces(t *testing.T) {
	addr := fakeNode(t, func(c net.Conn) {
		for {
			if _, err := readRequest(c); err != nil {
				return
			}
			reply(c, wire.ResponseHeader{Status: wire.StatusIOError}, []byte("disk /d0 failed"))
		}
	})
	cl := open(t, addr)
	err := cl.Put(context.Background(), []byte("k"), []byte("v"))
	var se *wire.StatusError
	if !errors.As(err, &se) || se.Status != wire.StatusIOError || se.Message != "disk /d0 failed" {
		t.Fatalf("got %v", err)
	}
	// The connection stays usable after a clean error answer.
	if err := cl.Put(context.Background(), []byte("k"), []byte("v")); wire.StatusOf(err) != wire.StatusIOError {
		t.Fatalf("second call: %v", err)
	}
}

func TestOversizedAnswerRejected(t *testing.T) {
	addr := fakeNode(t, func(c net.Conn) {
		if _, err := readRequest(c); err != nil {
			return
		}
		reply(c, wire.ResponseHeader{Status: wire.StatusOK, Stored: 100}, make([]byte, 100))
	})
	cl := open(t, addr)
	dst := make([]byte, 10)
	_, _, err := cl.GetRange(context.Background(), []byte("k"), 0, 10, dst)
	if wire.StatusOf(err) != wire.StatusInvalid {
		t.Fatalf("got %v, want INVALID for an answer larger than asked", err)
	}
}

// TestContextDeadlineOnPooledConnection: a call's context deadline applies
// exactly even on a pooled connection whose socket already has a later
// deadline from an earlier call (which the client may keep, slightly
// early, only for deadlines it derives from Timeout).
func TestContextDeadlineOnPooledConnection(t *testing.T) {
	addr := fakeNode(t, func(c net.Conn) {
		if _, err := readRequest(c); err != nil {
			return
		}
		reply(c, wire.ResponseHeader{Status: wire.StatusOK, Stored: 3}, nil)
		_, _ = io.Copy(io.Discard, c) // then silent
	})
	cl := open(t, addr) // Timeout 5 s
	if n, err := cl.Exist(context.Background(), []byte("k")); err != nil || n != 3 {
		t.Fatalf("first call: %d %v", n, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	// TIMEOUT, and no retry on a fresh connection the deadline would
	// cut at its dial (that one would read as UNAVAILABLE).
	err := cl.Put(ctx, []byte("k"), []byte("v"))
	if wire.StatusOf(err) != wire.StatusTimeout {
		t.Fatalf("second call: got %v, want TIMEOUT", err)
	}
	// Far below the 5 s Timeout: the context's deadline is the one that
	// ended the call, not the socket's later one.
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("second call took %v; its context allowed 200ms", d)
	}
}

// TestBackoffCountsIncidentsNotCalls: calls that fail together (in flight
// when the node paused) open one minimal back-off window; a failure after
// the window ended doubles it; a success clears it.
func TestBackoffCountsIncidentsNotCalls(t *testing.T) {
	p := &peer{addr: "node", opts: &Options{Logger: slog.New(slog.DiscardHandler)}}
	now := time.Now()
	for range 16 {
		p.fail(now.Add(time.Millisecond), 0, nil)
	}
	if p.brk.word.Load() != windowEnd(now.Add(time.Millisecond+minBackoff)) {
		t.Fatalf("16 simultaneous failures: down until +%v, want +%v", time.Duration(p.brk.word.Load()-monoNanos(now)), time.Millisecond+minBackoff)
	}
	later := now.Add(time.Second) // the window has ended; its probe fails too
	ok, hold := p.admit(later, later.Add(time.Second))
	if !ok || hold == 0 {
		t.Fatalf("after the window: admitted %v as probe %d, want the probe", ok, hold)
	}
	p.fail(later, hold, nil)
	if p.brk.word.Load() != windowEnd(later.Add(2*minBackoff)) {
		t.Fatalf("a second incident: down until +%v, want +%v", time.Duration(p.brk.word.Load()-monoNanos(later)), 2*minBackoff)
	}
	p.succeed()
	if p.isDown(later) || p.brk.failures.Load() != 0 {
		t.Fatal("a success left the node backed off")
	}
}

// TestBackoffConcurrentFirstFailures: calls failing at the same moment
// from many goroutines, before any window is open, open one minimal
// window and count one failure (run with -race). Probabilistic: the
// goroutines must overlap; a check-then-add version failed about one run
// in five.
func TestBackoffConcurrentFirstFailures(t *testing.T) {
	for round := 0; round < 500; round++ {
		p := &peer{addr: "node", opts: &Options{Logger: slog.New(slog.DiscardHandler)}}
		now := time.Now()
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				p.fail(now, 0, nil)
			}()
		}
		close(start)
		wg.Wait()
		if p.brk.word.Load() != windowEnd(now.Add(minBackoff)) || p.brk.failures.Load() != 1 {
			t.Fatalf("round %d: down until +%v after %d counted failures, want +%v after 1", round, time.Duration(p.brk.word.Load()-monoNanos(now)), p.brk.failures.Load(), minBackoff)
		}
	}
}

// TestBackoffFollowsMonotonicClock: a window opened at time.Now() starts
// and ends where it should when measured on the monotonic clock, and a
// time without a monotonic reading (compared by its wall clock) agrees
// while the clock is not stepped. A real wall-clock step cannot be made
// in a test; that the window ignores one follows from time.Time.Sub.
func TestBackoffFollowsMonotonicClock(t *testing.T) {
	p := &peer{addr: "node", opts: &Options{Logger: slog.New(slog.DiscardHandler)}}
	now := time.Now()
	p.fail(now, 0, nil)
	if !p.isDown(now.Add(minBackoff / 2)) {
		t.Fatal("not backed off within the window")
	}
	if p.isDown(now.Add(minBackoff + time.Millisecond)) {
		t.Fatal("still backed off after the window")
	}
	// Round(0) strips the monotonic reading: such a time is compared by
	// its wall clock, and must agree with the monotonic one for an
	// unstepped clock.
	if !p.isDown(now.Round(0).Add(minBackoff / 2)) {
		t.Fatal("a wall-clock time inside the window read as outside it")
	}
}

// isDown reports that the node's breaker refuses calls at now: open, or
// held by a trial.
func (p *peer) isDown(now time.Time) bool { return p.brk.refuses(now) }

// TestBackoffOneProbe: when a window ends, of the callers arriving together
// exactly one is let through as the probe (run with -race); the others are
// refused until it settles. A failed probe opens a doubled window, a
// released one (no verdict) lets the next caller probe at once, and a
// successful one admits everybody.
func TestBackoffOneProbe(t *testing.T) {
	p := &peer{addr: "node", opts: &Options{Timeout: time.Second, Logger: slog.New(slog.DiscardHandler)}}
	now := time.Now()
	p.fail(now, 0, nil)
	admitAll := func(at time.Time) (probes []int64, refused, plain int) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				ok, hold := p.admit(at, at.Add(time.Hour))
				mu.Lock()
				defer mu.Unlock()
				switch {
				case !ok:
					refused++
				case hold != 0:
					probes = append(probes, hold)
				default:
					plain++
				}
			}()
		}
		close(start)
		wg.Wait()
		return probes, refused, plain
	}
	if probes, refused, plain := admitAll(now.Add(minBackoff / 2)); len(probes) != 0 || refused != 16 {
		t.Fatalf("inside the window: %d probes, %d refused, %d plain; want 0, 16, 0", len(probes), refused, plain)
	}
	after := now.Add(minBackoff + time.Millisecond)
	probes, refused, plain := admitAll(after)
	if len(probes) != 1 || refused != 15 {
		t.Fatalf("window ended: %d probes, %d refused, %d plain; want 1, 15, 0", len(probes), refused, plain)
	}
	// The probe holds the node for at most one Timeout (its deadline
	// here is an hour away) and the grace for reporting its failure.
	if p.isDown(after.Add(p.opts.Timeout + minBackoff + time.Millisecond)) {
		t.Fatal("the probe's hold outlasts the Timeout and its grace")
	}
	// A call that was in flight since before the incident fails during
	// the hold: the same incident, the hold stays.
	p.fail(after, 0, nil)
	if p.brk.failures.Load() != 1 {
		t.Fatalf("a plain failure during the probe counted: %d failures", p.brk.failures.Load())
	}
	// The probe fails: the next window is twice as long.
	p.fail(after, probes[0], nil)
	if p.brk.word.Load() != windowEnd(after.Add(2*minBackoff)) || p.brk.failures.Load() != 2 {
		t.Fatalf("failed probe: down until +%v after %d failures, want +%v after 2", time.Duration(p.brk.word.Load()-monoNanos(after)), p.brk.failures.Load(), 2*minBackoff)
	}
	p.release(probes[0]) // settled already: no effect
	if !p.isDown(after.Add(minBackoff)) {
		t.Fatal("releasing a settled probe reopened the node")
	}
	// The next probe ends without a verdict: the next caller probes.
	later := after.Add(2*minBackoff + time.Millisecond)
	ok, hold := p.admit(later, later.Add(time.Hour))
	if !ok || hold == 0 {
		t.Fatal("no probe after the second window")
	}
	p.release(hold)
	ok, hold2 := p.admit(time.Now().Add(time.Millisecond), time.Now().Add(time.Hour))
	if !ok || hold2 == 0 || hold2 == hold {
		t.Fatalf("after a released probe: admitted %v as probe %d (old %d), want a new probe", ok, hold2, hold)
	}
	p.succeed()
	if probes, refused, plain := admitAll(time.Now()); plain != 16 {
		t.Fatalf("after a success: %d probes, %d refused, %d plain; want 16 plain calls", len(probes), refused, plain)
	}
}

// TestSilentNodeProbedOnce: against a node that takes requests and never
// answers, once the first call's deadline has opened a back-off window and
// the window has ended, 16 callers arriving together send the node one
// request between them (the probe); the other 15 fail at once as backing
// off, as misses for EXIST, without waiting out the node's silence.
func TestSilentNodeProbedOnce(t *testing.T) {
	var requests atomic.Int32
	release := make(chan struct{})
	addr := fakeNode(t, func(c net.Conn) {
		for {
			if _, err := readRequest(c); err != nil {
				return
			}
			requests.Add(1)
			select { // silent until the test lets go
			case <-release:
				return
			case <-time.After(time.Minute):
				return
			}
		}
	})
	cl := open(t, addr) // Timeout 5 s
	outlastWindow(t, cl)

	results := make(chan error, 16)
	for range 16 {
		go func() {
			_, err := cl.Exist(context.Background(), []byte("k"))
			results <- err
		}()
	}
	// The 15 refused calls return without waiting for the probe, which
	// is still waiting on the silent node.
	for range 15 {
		err := <-results
		if !errors.Is(err, ErrPeerDown) || !strings.Contains(err.Error(), "backing off") {
			t.Fatalf("a call beside the probe: %v, want an immediate back-off miss", err)
		}
	}
	// The probe's request reaches the node (it may still be on its way).
	waitCount(t, &requests, 2)
	close(release) // the node hangs up: the probe fails
	if err := <-results; !errors.Is(err, ErrPeerDown) || strings.Contains(err.Error(), "backing off") {
		t.Fatalf("the probe: %v, want a connection failure", err)
	}
	// The failed probe opened the next, doubled window.
	p := peerOf(t, cl, addr)
	if p.brk.failures.Load() != 2 || !p.isDown(time.Now()) {
		t.Fatalf("after the failed probe: %d failures, down %v; want 2 and backed off", p.brk.failures.Load(), p.isDown(time.Now()))
	}
	if n := requests.Load(); n != 2 {
		t.Fatalf("the silent node received %d requests in all, want 2", n)
	}
}

// TestBackoffProbeTimesOut: a probe whose call times out reports its
// failure just after its deadline; its hold is still there (no second
// probe has started), so the failure counts and the window doubles.
func TestBackoffProbeTimesOut(t *testing.T) {
	p := &peer{addr: "node", opts: &Options{Timeout: time.Second, Logger: slog.New(slog.DiscardHandler)}}
	now := time.Now()
	p.fail(now, 0, nil)
	start := now.Add(minBackoff + time.Millisecond)
	deadline := start.Add(50 * time.Millisecond)
	ok, hold := p.admit(start, deadline)
	if !ok || hold == 0 {
		t.Fatal("no probe after the window")
	}
	late := deadline.Add(time.Millisecond)
	if ok, _ := p.admit(late, late.Add(time.Second)); ok {
		t.Fatal("a second probe started while the first was reporting its timeout")
	}
	p.fail(late, hold, nil)
	if p.brk.failures.Load() != 2 || p.brk.word.Load() != windowEnd(late.Add(2*minBackoff)) {
		t.Fatalf("the timed-out probe: %d failures, down until +%v; want 2, +%v", p.brk.failures.Load(), time.Duration(p.brk.word.Load()-monoNanos(late)), 2*minBackoff)
	}
}

// TestBackoffHoldsAreUnique: probes with the same deadline (a batch's
// chunks, an engine's calls under one context) get different holds, so a
// finished probe's release cannot end a later probe's hold.
func TestBackoffHoldsAreUnique(t *testing.T) {
	p := &peer{addr: "node", opts: &Options{Timeout: time.Second, Logger: slog.New(slog.DiscardHandler)}}
	now := time.Now()
	p.fail(now, 0, nil)
	at := now.Add(minBackoff + time.Millisecond)
	deadline := at.Add(time.Second)
	_, first := p.admit(at, deadline)
	p.release(first)
	ok, second := p.admit(at, deadline)
	if !ok || second == 0 || second == first {
		t.Fatalf("second probe: admitted %v with hold %d (first %d), want a new hold", ok, second, first)
	}
	if first%2 == 0 || second%2 == 0 {
		t.Fatalf("holds %d and %d: want odd (window ends are even)", first, second)
	}
	p.release(first) // late, from the first probe's caller
	if ok, _ := p.admit(at, deadline); ok {
		t.Fatal("a stale release ended the second probe's hold")
	}
}

// TestCancelledProbeHandsOver: a probe whose caller gives up settles
// nothing about the node, so the next call probes at once instead of
// being refused until the probe's hold runs out.
func TestCancelledProbeHandsOver(t *testing.T) {
	var requests atomic.Int32
	addr := fakeNode(t, func(c net.Conn) {
		for {
			if _, err := readRequest(c); err != nil {
				return
			}
			requests.Add(1) // and never answer
		}
	})
	cl := open(t, addr) // Timeout 5 s
	outlastWindow(t, cl)

	probeCtx, giveUp := context.WithCancel(context.Background())
	probeDone := make(chan error, 1)
	go func() {
		_, err := cl.Exist(probeCtx, []byte("k"))
		probeDone <- err
	}()
	waitCount(t, &requests, 2) // the probe's request is at the node
	giveUp()
	if err := <-probeDone; !errors.Is(err, context.Canceled) || !errors.Is(err, wire.StatusUnavailable) {
		t.Fatalf("the cancelled probe: %v, want its cancellation (context.Canceled) as an UNAVAILABLE status", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second) // its request must reach the node
	defer cancel()
	_, err := cl.Exist(ctx, []byte("k"))
	if err != nil && strings.Contains(err.Error(), "backing off") {
		t.Fatalf("the call after a cancelled probe was refused (%v); want it to probe the node", err)
	}
	// Its request reached the node (the count may lag the call's return).
	waitCount(t, &requests, 3)
	if n := requests.Load(); n != 3 {
		t.Fatalf("the node received %d requests, want 3 (first call, cancelled probe, next probe)", n)
	}
}

// A call whose deadline passed before its node was asked (a batch chunk
// that waited for a slot behind a slow node) is a TIMEOUT that sends
// nothing and counts nothing against the node: it was never contacted.
func TestDeadlinePassedBeforeSendingSparesTheNode(t *testing.T) {
	var asked atomic.Int32
	addr := fakeNode(t, func(c net.Conn) {
		for {
			if _, err := readRequest(c); err != nil {
				return
			}
			asked.Add(1)
			reply(c, wire.ResponseHeader{Status: wire.StatusOK}, nil)
		}
	})
	cl, err := Open(Options{Namespace: []byte("ns"), Members: []string{addr}, Timeout: time.Second, SharedMemory: ShmOff})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	p := peerOf(t, cl, addr)
	ran := false
	err = cl.exchange(context.Background(), p, time.Now().Add(-time.Millisecond), true, func(*cconn) error { ran = true; return nil })
	if wire.StatusOf(err) != wire.StatusTimeout || errors.Is(err, wire.StatusNotFound) {
		t.Fatalf("an expired call: %v, want TIMEOUT and not a miss", err)
	}
	if ran || asked.Load() != 0 || p.isDown(time.Now()) {
		t.Fatalf("an expired call ran %v, asked the node %d times, backed it off %v", ran, asked.Load(), p.isDown(time.Now()))
	}
	if err := cl.Ping(context.Background(), addr); err != nil {
		t.Fatalf("the node after an expired call: %v", err)
	}
}

// peerOf is the client's peer for addr.
func peerOf(t *testing.T, cl *Client, addr string) *peer {
	t.Helper()
	cl.peerMu.Lock()
	defer cl.peerMu.Unlock()
	p := cl.peers[addr]
	if p == nil {
		t.Fatalf("no peer for %s", addr)
	}
	return p
}

// TestUnreachableNodeProbeDialFails: against a port nobody listens on, the
// probe after the first window fails at its dial, and that failure counts:
// the next window is twice as long.
func TestUnreachableNodeProbeDialFails(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // connections are refused from now on
	cl := open(t, addr)
	if _, err := cl.Exist(context.Background(), []byte("k")); !errors.Is(err, ErrPeerDown) {
		t.Fatalf("first call: %v, want ErrPeerDown", err)
	}
	p := peerOf(t, cl, addr)
	if p.brk.failures.Load() != 1 {
		t.Fatalf("after the first refused dial: %d failures, want 1", p.brk.failures.Load())
	}
	endWindow(t, p)
	if _, err := cl.Exist(context.Background(), []byte("k")); !errors.Is(err, ErrPeerDown) || strings.Contains(err.Error(), "backing off") {
		t.Fatalf("the probe: %v, want a refused connection", err)
	}
	if p.brk.failures.Load() != 2 || !p.isDown(time.Now()) {
		t.Fatalf("after the probe's refused dial: %d failures, down %v; want 2 and backed off", p.brk.failures.Load(), p.isDown(time.Now()))
	}
}

// TestBackoffStaleProbeFailure: a probe that fails after another call has
// already settled the incident (a call in flight since before it
// succeeded) changes nothing: the node stays up.
func TestBackoffStaleProbeFailure(t *testing.T) {
	p := &peer{addr: "node", opts: &Options{Timeout: time.Second, Logger: slog.New(slog.DiscardHandler)}}
	now := time.Now()
	p.fail(now, 0, nil)
	at := now.Add(minBackoff + time.Millisecond)
	_, hold := p.admit(at, at.Add(time.Second))
	p.succeed() // an older call got its answer
	p.fail(at.Add(time.Millisecond), hold, nil)
	if p.brk.failures.Load() != 0 || p.isDown(at.Add(2*time.Millisecond)) {
		t.Fatalf("a stale probe failure: %d failures, down %v; want the node up", p.brk.failures.Load(), p.isDown(at.Add(2*time.Millisecond)))
	}
}

// TestSucceedClearsAWindowWithoutCount: between fail's compare-and-swap
// and its count, a window is on record with no failure counted; a success
// in that moment still clears it rather than leaving the node in probe
// mode.
func TestSucceedClearsAWindowWithoutCount(t *testing.T) {
	p := &peer{addr: "node", opts: &Options{Timeout: time.Second, Logger: slog.New(slog.DiscardHandler)}}
	p.brk.word.Store(windowEnd(time.Now().Add(time.Minute)))
	p.succeed()
	if p.isDown(time.Now()) {
		t.Fatal("a success left an uncounted window open")
	}
}

// outlastWindow makes a call to a node that takes requests and never
// answers, cut by a 1 s deadline (long enough for a fresh dial and the
// write on a loaded machine: the request must reach the node), which opens
// a back-off window, and ends the window (endWindow).
func outlastWindow(t *testing.T, cl *Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_, err := cl.Exist(ctx, []byte("k"))
	cancel()
	if !errors.Is(err, ErrPeerDown) {
		t.Fatalf("first call to a silent node: %v, want ErrPeerDown", err)
	}
	addr, _ := cl.Owner([]byte("k"))
	endWindow(t, peerOf(t, cl, addr))
}

// endWindow ends the open back-off window of p's breaker now, as its
// running out would, so the next call is the breaker's trial without the
// test sleeping through the window. The windows' lengths and ends are
// tested on explicit times (TestBackoff*, TestBreakerStates); the tests
// that use this are about what follows a window.
func endWindow(t *testing.T, p *peer) {
	t.Helper()
	w := p.brk.word.Load()
	if p.brk.state(time.Now()) != breakerOpen || !p.brk.word.CompareAndSwap(w, windowEnd(time.Now())) {
		t.Fatalf("the breaker is %v, not open", p.brk.state(time.Now()))
	}
}

// waitCount waits until a fake node has counted n requests (its count
// lags the calls that sent them), failing after 10 s.
func waitCount(t *testing.T, count *atomic.Int32, n int32) {
	t.Helper()
	for wait := time.Now().Add(10 * time.Second); count.Load() < n; time.Sleep(time.Millisecond) {
		if time.Now().After(wait) {
			t.Fatalf("the node counted %d requests after 10 s, want %d", count.Load(), n)
		}
	}
}

// TestBackoffErrorSaysWhy: a call refused by the back-off window after a
// node refused a connection says why the node is being backed off from,
// not only that it is.
func TestBackoffErrorSaysWhy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens: connections are refused
	cl := open(t, addr)
	if _, err := cl.Exist(context.Background(), []byte("k")); !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("first call: %v, want the refusal", err)
	}
	_, err = cl.Exist(context.Background(), []byte("k"))
	if !strings.Contains(err.Error(), "backing off") || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("call in the back-off window: %v, want it to say it backs off and why", err)
	}
}
