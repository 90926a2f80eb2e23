package client

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dfkv/dfkv/wire"
)

// TestStalledTracksSilence: a node with calls in flight is stalled once
// none of them has been answered for a quarter of the Timeout (at least
// 250 ms), counted from when it went from idle to busy or from its last
// answer; an idle node never is.
func TestStalledTracksSilence(t *testing.T) {
	p := newPeer("n", &Options{Timeout: 4 * time.Second})
	if _, yes := p.stalled(time.Now().Add(time.Hour)); yes {
		t.Fatal("an idle node is stalled")
	}
	a, b := &cconn{}, &cconn{}
	p.track(a)
	t0 := monoTime(p.progress.Load()) // going busy started the silence
	p.track(b)                        // a second call does not restart it
	if p.progress.Load() != monoNanos(t0) {
		t.Fatal("a second call in flight restarted the silence")
	}
	if _, yes := p.stalled(t0.Add(999 * time.Millisecond)); yes {
		t.Fatal("stalled before a quarter of the Timeout")
	}
	if silent, yes := p.stalled(t0.Add(1001 * time.Millisecond)); !yes || silent != 1001*time.Millisecond {
		t.Fatalf("after 1001 ms of silence with calls in flight: stalled %v (%s)", yes, silent)
	}
	p.alive() // an answer starts arriving
	if _, yes := p.stalled(time.Now()); yes {
		t.Fatal("stalled right after an answer")
	}
	p.untrack(a)
	p.untrack(b)
	if _, yes := p.stalled(time.Now().Add(time.Hour)); yes {
		t.Fatal("stalled with nothing in flight")
	}
	if d := newPeer("n", &Options{Timeout: 100 * time.Millisecond}).stallAfter(); d != minStall {
		t.Fatalf("stallAfter with a 100 ms Timeout = %s, want the %s floor", d, minStall)
	}
}

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
	cl, err := Open(Options{Namespace: []byte("ns"), Members: []string{addr}, Timeout: 2 * time.Second, DialTimeout: time.Second})
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
		time.Sleep(20 * time.Millisecond)
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
	cl, err := Open(Options{Namespace: []byte("ns"), Members: []string{addr}, Timeout: 2 * time.Second, DialTimeout: time.Second,
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
	if !strings.Contains(logs.String(), "stopped answering") {
		t.Fatalf("no log line about the cut calls:\n%s", logs.String())
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
func monoTime(n int64) time.Time { return monoEpoch.Add(time.Duration(n)) }
