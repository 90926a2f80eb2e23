package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dfkv/dfkv/wire"
)

// TestStalledTracksSilence: a node with calls in flight is silent once it
// has not been heard from for a quarter of the Timeout (at least 250 ms),
// counted from when it went from idle to busy or from its last answer,
// whatever request bytes it took meanwhile; it is stalled (new calls fail
// fast) only once a liveness probe went unanswered, and neither once it
// is heard from again; an idle node is neither. cutSilent cuts only the
// calls that have not moved for that long either. It runs in a synctest
// bubble, so the clock moves only when the test sleeps.
func TestStalledTracksSilence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPeer("n", &Options{Timeout: 4 * time.Second, Logger: slog.New(slog.DiscardHandler)})
		if _, yes := p.silent(time.Now().Add(time.Hour)); yes {
			t.Fatal("an idle node is silent")
		}
		a, b := &cconn{p: p, nc: nopConn{}}, &cconn{p: p, nc: nopConn{}}
		p.track(a)
		t0 := monoTime(p.heard.Load()) // going busy started the silence
		time.Sleep(time.Millisecond)   // on the bubble's clock: exactly 1 ms later
		p.track(b)                     // a second call does not restart it
		if p.heard.Load() != monoNanos(t0) {
			t.Fatal("a second call in flight restarted the silence")
		}
		if _, yes := p.silent(t0.Add(999 * time.Millisecond)); yes {
			t.Fatal("silent before a quarter of the Timeout")
		}
		b.sent(progressPiece) // request bytes taken: b moved, the node is not heard
		now := time.Now()
		if silent, yes := p.silent(t0.Add(1001 * time.Millisecond)); !yes || silent != 1001*time.Millisecond {
			t.Fatalf("after 1001 ms unheard with calls in flight: silent %v (%s)", yes, silent)
		}
		if _, yes := p.stalled(now.Add(time.Hour)); yes {
			t.Fatal("stalled before any probe went unanswered")
		}
		a.progress.Store(monoNanos(now.Add(-2 * time.Second))) // a has stood still for 2 s
		if !p.standing(now.Add(500 * time.Millisecond)) {
			t.Fatal("a call that stood still for 2.5 s is not standing")
		}
		p.cutSilent(now.Add(500*time.Millisecond), time.Second)
		if !a.cut.Load() || b.cut.Load() {
			t.Fatalf("cutSilent 0.5 s after b moved a piece, 2.5 s after a did: cut a %v, b %v; want a only", a.cut.Load(), b.cut.Load())
		}
		p.unanswered.Store(true) // as the watchdog does when a probe fails
		if _, yes := p.stalled(time.Now()); !yes {
			t.Fatal("not stalled after an unanswered probe, with calls in flight")
		}
		b.heard() // an answer starts arriving
		if _, yes := p.stalled(time.Now()); yes {
			t.Fatal("stalled right after an answer")
		}
		if _, yes := p.silent(time.Now()); yes {
			t.Fatal("silent right after an answer")
		}
		p.untrack(a)
		p.untrack(b)
		p.unanswered.Store(true)
		if _, yes := p.stalled(time.Now().Add(time.Hour)); yes {
			t.Fatal("stalled with nothing in flight: no call could reach the node to hear from it")
		}
		if d := newPeer("n", &Options{Timeout: 100 * time.Millisecond}).stallAfter(); d != minStall {
			t.Fatalf("stallAfter with a 100 ms Timeout = %s, want the %s floor", d, minStall)
		}
	})
}

// nopConn is a net.Conn whose deadlines cutSilent may set.
type nopConn struct{ net.Conn }

func (nopConn) SetDeadline(time.Time) error { return nil }

// TestStalledNodeFailsFastThenRecovers: a node that takes a call and then
// stops answering (paused, wedged) has that call cut and is backed off, so
// the next call is an immediate miss rather than another wait; once it
// answers again, the probe after the back-off window finds it and calls go
// through.
func TestStalledNodeFailsFastThenRecovers(t *testing.T) {
	answer := make(chan struct{})
	addr := fakeNode(t, func(c net.Conn) {
		for {
			h, err := readRequest(c)
			if err != nil {
				return
			}
			select {
			case <-answer: // answers once let go
			case <-time.After(time.Minute):
				return
			}
			if h.Op == wire.OpExist {
				reply(c, wire.ResponseHeader{Status: wire.StatusOK, Stored: 3}, nil)
			}
		}
	})
	cl, err := Open(Options{Namespace: []byte("ns"), Members: []string{addr}, SharedMemory: ShmOff, Timeout: 2 * time.Second, DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cl.Exist(ctx, []byte("k")); !errors.Is(err, ErrPeerDown) || !errors.Is(err, wire.StatusNotFound) {
		t.Fatalf("the call the node never answered: %v, want a miss from an unreachable node", err)
	}
	if _, err := cl.Exist(ctx, []byte("k")); !errors.Is(err, ErrPeerDown) || !errors.Is(err, wire.StatusNotFound) {
		t.Fatalf("the call right after: %v, want an immediate miss", err)
	}
	close(answer)
	for {
		stored, err := cl.Exist(ctx, []byte("k"))
		if err == nil && stored == 3 {
			break
		}
		if !errors.Is(err, ErrPeerDown) {
			t.Fatalf("a call while the node recovers: %v", err)
		}
		time.Sleep(20 * time.Millisecond) // polling: calls fail fast until the breaker's window runs out
	}
}

// TestStalledCallsCut: calls that reached a node before it stalled are
// cut by the watchdog once it has been silent for a quarter of the
// Timeout, rather than waiting out their own deadlines (30 s here): an
// engine whose threads all called the node in its first moments gets them
// back. The node is then backed off, as after any failed call.
func TestStalledCallsCut(t *testing.T) {
	addr := fakeNode(t, func(c net.Conn) {
		for {
			if _, err := readRequest(c); err != nil {
				return
			}
			// never answers
		}
	})
	logs := &lockedLog{}
	cl, err := Open(Options{Namespace: []byte("ns"), Members: []string{addr}, SharedMemory: ShmOff, Timeout: 2 * time.Second, DialTimeout: time.Second,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	results := make(chan error, 4)
	for i := range 4 {
		go func() {
			_, err := cl.Exist(ctx, []byte{byte(i)})
			results <- err
		}()
	}
	for range 4 {
		if err := <-results; !errors.Is(err, ErrPeerDown) || !errors.Is(err, wire.StatusNotFound) {
			t.Fatalf("a call to the stalled node: %v, want a miss from an unreachable node", err)
		}
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Fatalf("the calls ended after %s: they waited for their deadline, not the watchdog", took)
	}
	if p := peerOf(t, cl, addr); !p.isDown(time.Now()) {
		t.Fatal("the stalled node is not backed off after its calls were cut")
	}
	// The watchdog logs after it has cut the calls, so the line may come
	// just after they returned.
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(logs.String(), "stopped answering"); {
		if time.Now().After(deadline) {
			t.Fatalf("no log line about the cut calls:\n%s", logs.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// monoTime is the time.Time of a monoNanos reading (for tests).
func monoTime(n int64) time.Time { return monoEpoch.Add(time.Duration(n - monoOffset)) }

// TestSlowLargeTransfersAreNotStalls: a value that takes longer than the
// stall threshold to move, but keeps moving, is not taken for a stalled
// node, either way: a GET whose body trickles in after its prefix, and a
// PUT whose body the node reads slowly before it answers, and batches of
// half-megabyte values both ways. Each moves 24–32 MiB at about 13 MB/s
// (2–2.5 s) against a threshold of 1 s (Timeout 4 s), with a gap of about
// 10 ms between pieces; before the bytes a call moves counted, the
// watchdog cut each at 1 s.
func TestSlowLargeTransfersAreNotStalls(t *testing.T) {
	const size = 32 << 20
	const batchItems, batchValue = 48, 512 << 10
	value := make([]byte, size)
	for i := range value {
		value[i] = byte(i*7 + i>>16)
	}
	got := make(chan []byte, 1)
	addr := fakeNode(t, func(c net.Conn) {
		slowReader(c)
		for {
			h, err := readPrefix(c)
			if err != nil {
				return
			}
			switch h.Op {
			case wire.OpPut:
				body := make([]byte, h.BodyLen)
				if readSlowly(c, body) != nil {
					return
				}
				got <- body
				reply(c, wire.ResponseHeader{Status: wire.StatusOK}, nil)
			case wire.OpGet:
				var rh []byte
				rh = wire.AppendResponse(rh, &wire.ResponseHeader{Status: wire.StatusOK, Stored: size, BodyLen: size})
				if _, err := c.Write(rh); err != nil || writeSlowly(c, value) != nil {
					return
				}
			case wire.OpBatchPut, wire.OpBatchGet:
				// Batches of half-megabyte values, at the same pace: no one
				// value is a progressPiece, but the call moves many.
				if readSlowly(c, make([]byte, h.BodyLen)) != nil {
					return
				}
				out := wire.AppendResponse(nil, &wire.ResponseHeader{Status: wire.StatusOK, Stored: h.Length})
				for i := uint64(0); i < h.Length; i++ {
					if h.Op == wire.OpBatchPut {
						out = append(out, byte(wire.StatusOK))
					} else {
						out = wire.AppendGetRecord(out, wire.StatusOK, batchValue, batchValue)
						out = append(out, value[:batchValue]...)
					}
				}
				if writeSlowly(c, out) != nil {
					return
				}
			default:
				return
			}
		}
	})
	logs := &lockedLog{}
	cl, err := Open(Options{Namespace: []byte("ns"), Members: []string{addr}, SharedMemory: ShmOff, Timeout: 4 * time.Second, DialTimeout: time.Second,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	start := time.Now()
	if err := cl.Put(ctx, []byte("k"), value); err != nil {
		t.Fatalf("a slow 32 MiB PUT (%s): %v\n%s", time.Since(start), err, logs.String())
	}
	if body := <-got; !bytes.Equal(body, value) {
		t.Fatal("the node received other bytes than were put")
	}
	t.Logf("PUT moved 32 MiB in %s", time.Since(start))

	start = time.Now()
	dst := make([]byte, size)
	n, _, err := cl.Get(ctx, []byte("k"), dst)
	if err != nil {
		t.Fatalf("a slow 32 MiB GET (%s): %v\n%s", time.Since(start), err, logs.String())
	}
	if n != size || !bytes.Equal(dst, value) {
		t.Fatalf("GET returned %d bytes, not the value sent", n)
	}
	t.Logf("GET moved 32 MiB in %s", time.Since(start))

	keys, values := make([][]byte, batchItems), make([][]byte, batchItems)
	for i := range keys {
		keys[i], values[i] = []byte{byte(i)}, value[:batchValue]
	}
	start = time.Now()
	for i, err := range cl.PutBatch(ctx, keys, values) {
		if err != nil {
			t.Fatalf("a slow batch of %d half-megabyte PUTs (%s), item %d: %v\n%s", batchItems, time.Since(start), i, err, logs.String())
		}
	}
	t.Logf("BATCH_PUT moved %d MiB in %s", batchItems*batchValue>>20, time.Since(start))
	start = time.Now()
	dsts := make([][]byte, batchItems)
	for i := range dsts {
		dsts[i] = make([]byte, batchValue)
	}
	for i, r := range cl.GetBatch(ctx, keys, dsts) {
		if r.Err != nil || !bytes.Equal(r.Data, value[:batchValue]) {
			t.Fatalf("a slow batch of %d half-megabyte GETs (%s), item %d: %v\n%s", batchItems, time.Since(start), i, r.Err, logs.String())
		}
	}
	t.Logf("BATCH_GET moved %d MiB in %s", batchItems*batchValue>>20, time.Since(start))
	if strings.Contains(logs.String(), "stopped answering") {
		t.Fatalf("the watchdog judged a moving transfer stalled:\n%s", logs.String())
	}
}

// TestStoppedNodeFoundUnderLargePuts: a node that takes connections but
// reads nothing (stopped) is still found while large PUTs keep arriving.
// The socket buffers take the first megabytes of each PUT whether or not
// the node reads them; that counts for the PUT's own call, never for the
// node, so the GET in flight is cut within about stallAfter (1 s here),
// not at its 30 s deadline, and the PUTs stuck behind it are cut too.
func TestStoppedNodeFoundUnderLargePuts(t *testing.T) {
	stop := make(chan struct{})
	addr := fakeNode(t, func(c net.Conn) { <-stop })
	t.Cleanup(func() { close(stop) })
	cl, err := Open(Options{Namespace: []byte("ns"), Members: []string{addr}, SharedMemory: ShmOff, Timeout: 4 * time.Second, DialTimeout: time.Second,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	got := make(chan error, 1)
	go func() {
		_, _, err := cl.Get(ctx, []byte("g"), make([]byte, 16))
		got <- err
	}()
	value := make([]byte, 4<<20)
	var puts sync.WaitGroup
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var getErr error
loop:
	for {
		select {
		case getErr = <-got:
			break loop
		case <-tick.C:
			puts.Add(1)
			go func() {
				defer puts.Done()
				_ = cl.Put(ctx, []byte(fmt.Sprint(time.Now().UnixNano())), value)
			}()
		}
	}
	took := time.Since(start)
	if !errors.Is(getErr, ErrPeerDown) {
		t.Fatalf("the GET to a stopped node: %v, want a miss from an unreachable node", getErr)
	}
	if took > 10*time.Second {
		t.Fatalf("the GET was cut after %s: the PUTs' buffered bytes kept the stopped node looking alive", took)
	}
	done := make(chan struct{})
	go func() { puts.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("PUTs to the stopped node still waiting 15 s after the GET was cut")
	}
	t.Logf("GET cut after %s", took.Round(time.Millisecond))
}

// TestBusyNodeNotCut: a node that is alive but holds one call's answer
// while it reads another call's long body (as a node does for a PUT
// waiting for buffer budget) hears nothing from the held call and sends
// nothing on it; the watchdog asks the node (a PING) before cutting, and
// the node answers, so the held PUT completes instead of being failed
// and the node backed off.
func TestBusyNodeNotCut(t *testing.T) {
	bigStarted, bigDone := make(chan struct{}), make(chan struct{})
	addr := fakeNode(t, func(c net.Conn) {
		slowReader(c)
		for {
			h, err := readPrefix(c)
			if err != nil {
				return
			}
			switch {
			case h.Op == wire.OpPing:
			case h.Op == wire.OpPut && h.BodyLen > 1<<20: // the long body, read at about 13 MB/s
				close(bigStarted)
				if readSlowly(c, make([]byte, h.BodyLen)) != nil {
					return
				}
				close(bigDone)
			case h.Op == wire.OpPut: // held until the long one is in
				if _, err := io.CopyN(io.Discard, c, int64(h.BodyLen)); err != nil {
					return
				}
				select {
				case <-bigDone:
				case <-time.After(20 * time.Second):
					return
				}
			default:
				return
			}
			reply(c, wire.ResponseHeader{Status: wire.StatusOK}, nil)
		}
	})
	logs := &lockedLog{}
	cl, err := Open(Options{Namespace: []byte("ns"), Members: []string{addr}, SharedMemory: ShmOff, Timeout: 4 * time.Second, DialTimeout: time.Second,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	bigErr := make(chan error, 1)
	go func() { bigErr <- cl.Put(ctx, []byte("big"), make([]byte, 32<<20)) }()
	<-bigStarted // the long PUT is under way
	start := time.Now()
	if err := cl.Put(ctx, []byte("small"), make([]byte, 256<<10)); err != nil {
		t.Fatalf("the held PUT on a busy, live node (%s): %v\n%s", time.Since(start), err, logs.String())
	}
	if err := <-bigErr; err != nil {
		t.Fatalf("the long PUT: %v\n%s", err, logs.String())
	}
	if strings.Contains(logs.String(), "stopped answering") {
		t.Fatalf("a live node's calls were cut:\n%s", logs.String())
	}
	t.Logf("the held PUT completed after %s", time.Since(start).Round(time.Millisecond))
}

// TestUnansweredProbeIsRetried: a node that missed one PING (a hiccup)
// while the calls left in flight move a body but hear nothing is probed
// again, so new calls stop failing fast once it answers, rather than for
// as long as the body takes.
func TestUnansweredProbeIsRetried(t *testing.T) {
	var pings atomic.Int32
	bigStarted, bigDone := make(chan struct{}), make(chan struct{})
	addr := fakeNode(t, func(c net.Conn) {
		slowReader(c)
		for {
			h, err := readPrefix(c)
			if err != nil {
				return
			}
			switch {
			case h.Op == wire.OpPing:
				if pings.Add(1) == 1 {
					<-bigDone // the first PING goes unanswered
					return
				}
			case h.Op == wire.OpPut && h.BodyLen > 1<<20: // a long body at about 13 MB/s
				close(bigStarted)
				if readSlowly(c, make([]byte, h.BodyLen)) != nil {
					return
				}
				close(bigDone)
			case h.Op == wire.OpPut && h.BodyLen == 1<<10: // held, standing, until the long one is in
				if _, err := io.CopyN(io.Discard, c, int64(h.BodyLen)); err != nil {
					return
				}
				select {
				case <-bigDone:
				case <-time.After(30 * time.Second):
				}
			case h.Op == wire.OpPut:
				if _, err := io.CopyN(io.Discard, c, int64(h.BodyLen)); err != nil {
					return
				}
			default:
				return
			}
			reply(c, wire.ResponseHeader{Status: wire.StatusOK}, nil)
		}
	})
	cl, err := Open(Options{Namespace: []byte("ns"), Members: []string{addr}, SharedMemory: ShmOff, Timeout: 4 * time.Second, DialTimeout: time.Second,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	go func() { _ = cl.Put(ctx, []byte("big"), make([]byte, 48<<20)) }()
	<-bigStarted
	go func() { _ = cl.Put(ctx, []byte("held"), make([]byte, 1<<10)) }() // cut after the missed PING
	// The held PUT stands for 1 s, the watchdog sends its PING, which
	// goes unanswered for probeWait (0.5 s): wait for that verdict (or
	// for the PING after it, if the verdict came and went meanwhile).
	p := peerOf(t, cl, addr)
	for wait := time.Now().Add(20 * time.Second); !p.unanswered.Load() && pings.Load() < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(wait) {
			t.Fatalf("no verdict on the missed PING after 20 s (%d PINGs)", pings.Load())
		}
	}
	var ok, fast int
	for {
		select {
		case <-bigDone:
			t.Fatalf("the long PUT finished first: %d small PUTs went through, %d failed fast; want the node probed again and calls let through", ok, fast)
		default:
		}
		if err := cl.Put(ctx, []byte("small"), make([]byte, 100)); err == nil {
			ok++
			if pings.Load() >= 2 {
				t.Logf("after %d PINGs: %d small PUTs failed fast, then they went through", pings.Load(), fast)
				return
			}
		} else {
			fast++
		}
		time.Sleep(20 * time.Millisecond) // polling, while the long body moves in real time
	}
}

// slowPiece and slowGap pace the slow transfers of these tests' nodes:
// 128 KiB every 10 ms, about 13 MB/s.
const (
	slowPiece = 128 << 10
	slowGap   = 10 * time.Millisecond
)

// slowReader gives c a small, fixed receive buffer, so a client's sends
// move only as fast as the node reads them.
func slowReader(c net.Conn) { _ = c.(*net.TCPConn).SetReadBuffer(256 << 10) }

// readSlowly fills b from c a slowPiece at a time, slowGap apart.
func readSlowly(c net.Conn, b []byte) error {
	for off := 0; off < len(b); off += slowPiece {
		if _, err := io.ReadFull(c, b[off:min(off+slowPiece, len(b))]); err != nil {
			return err
		}
		time.Sleep(slowGap)
	}
	return nil
}

// writeSlowly writes b to c a slowPiece at a time, slowGap apart.
func writeSlowly(c net.Conn, b []byte) error {
	for off := 0; off < len(b); off += slowPiece {
		if _, err := c.Write(b[off:min(off+slowPiece, len(b))]); err != nil {
			return err
		}
		time.Sleep(slowGap)
	}
	return nil
}
