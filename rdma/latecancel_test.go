package rdma

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/dfkv/dfkv/wire"
)

// gatedConn is a control connection whose "cut" (the watch callback's
// SetDeadline to the past) waits for the test to release it: it stands
// for the AfterFunc goroutine being scheduled late, which the Go runtime
// is free to do (stop() returns false as soon as the goroutine was
// started, it does not wait for it).
type gatedConn struct {
	net.Conn
	onWrite func()
	started chan struct{} // the callback reached SetDeadline
	gate    chan struct{} // the test lets it go on
	done    chan struct{} // the callback has moved the deadline
}

func (g *gatedConn) Write(b []byte) (int, error) {
	if f := g.onWrite; f != nil {
		f()
	}
	return g.Conn.Write(b)
}

func (g *gatedConn) SetDeadline(t time.Time) error {
	if t.Equal(time.Unix(1, 0)) {
		close(g.started)
		select { // late, but not forever: a fix that waits for it must not hang the test
		case <-g.gate:
		case <-time.After(300 * time.Millisecond):
		}
		defer close(g.done)
	}
	return g.Conn.SetDeadline(t)
}

// TestLateCancelDoesNotCutTheNextCall: a call whose context is cancelled after
// its last completion wait still succeeds and the Conn stays healthy (a
// pool would hand it out again). Its watch callback, started by the
// cancel but run late, must not cut the NEXT call on the same Conn.
func TestLateCancelDoesNotCutTheNextCall(t *testing.T) {
	r := newRig(t, nil)
	var gc *gatedConn
	c := r.dial(func(o *ClientOptions) {
		o.Dial = func(ctx context.Context, addr string) (net.Conn, error) {
			nc, err := r.ln.dial(ctx, addr)
			if err != nil {
				return nil, err
			}
			gc = &gatedConn{Conn: nc, started: make(chan struct{}), gate: make(chan struct{}), done: make(chan struct{})}
			return gc, nil
		}
	})
	// Call 1: the caller gives up while the LEASE_PUT goes out.
	ctx1, cancel1 := context.WithCancel(context.Background())
	defer cancel1()
	gc.onWrite = cancel1
	errs := make([]error, 1)
	err := c.PutBatchCtx(ctx1, time.Time{}, []wire.BlockKey{key(1)}, [][]byte{value(1, 4096)}, errs)
	gc.onWrite = nil
	if err != nil || errs[0] != nil {
		t.Fatalf("call 1 (cancelled after its WRITEs completed): %v %v; the test expects it to complete", err, errs[0])
	}
	// Call 2, another caller, no cancellation: the late callback of
	// call 1 runs while it is under way.
	gc.onWrite = func() {
		<-gc.started
		select {
		case <-gc.gate:
		default:
			close(gc.gate)
		}
		<-gc.done
		gc.onWrite = nil
	}
	err = c.PutBatchCtx(context.Background(), time.Time{}, []wire.BlockKey{key(2)}, [][]byte{value(2, 4096)}, errs)
	if err != nil || errs[0] != nil {
		t.Fatalf("call 2, never cancelled, on the Conn call 1 left healthy: %v %v", err, errs[0])
	}
}

// cancelOnRead calls onRead after each Read returns (no gate anywhere).
type cancelOnRead struct {
	net.Conn
	onRead func()
}

func (c *cancelOnRead) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if f := c.onRead; f != nil {
		f()
	}
	return n, err
}

// TestCancelAtACallsEndLeavesTheNextCallAlone: no delay injected. The caller's
// context is cancelled just as call 1 reads the last byte of its answer
// (call 1 then succeeds and its Conn stays healthy); call 2, never
// cancelled, follows at once on the same Conn, as from a pool.
func TestCancelAtACallsEndLeavesTheNextCallAlone(t *testing.T) {
	r := newRig(t, nil)
	var cc *cancelOnRead
	c := r.dial(func(o *ClientOptions) {
		o.Dial = func(ctx context.Context, addr string) (net.Conn, error) {
			nc, err := r.ln.dial(ctx, addr)
			if err != nil {
				return nil, err
			}
			cc = &cancelOnRead{Conn: nc}
			return cc, nil
		}
	})
	errs := make([]error, 1)
	for i := range 200 {
		ctx1, cancel1 := context.WithCancel(context.Background())
		reads := 0
		cc.onRead = func() {
			// the LEASE_PUT answer: prefix, then one status byte; cancel after the last
			if reads++; reads == 1 {
				cancel1()
			}
		}
		err := c.PutBatchCtx(ctx1, time.Time{}, []wire.BlockKey{key(1)}, [][]byte{value(1, 4096)}, errs)
		cc.onRead = nil
		cancel1()
		if err != nil {
			t.Logf("round %d: call 1 itself failed (%v); stopping", i, err)
			break
		}
		if err := c.PutBatchCtx(context.Background(), time.Time{}, []wire.BlockKey{key(2)}, [][]byte{value(2, 4096)}, errs); err != nil {
			t.Errorf("round %d: call 2, never cancelled: %v", i, err)
			break
		}
	}
}
